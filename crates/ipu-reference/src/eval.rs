//! Evaluation of a graph, operation by operation, in either precision (see the crate docs for
//! the device rules).

use ipu_graph::strided::{broadcast_strides, strides, walk};
use ipu_graph::{DType, Graph, OpKind, TensorType};
use ipu_numerics::round_to_f16;

use crate::gemm::{AmpRule, Partials, gemm, matmul_device, matmul_device_k_split};
use crate::{Precision, ReferenceError, Tensor, round_slice};

#[derive(Clone, Copy)]
struct Ctx {
    precision: Precision,
    threads: usize,
    /// The k chunks the device splits the current matmul into (1: none).
    k_splits: usize,
}

/// The build's choices that change the device's order of operations, which the device
/// precision follows: the graph matmuls split over k on separate tiles, by operation name,
/// with their number of k chunks (a build's `k_splits`). Empty: no split.
pub type DeviceSplits = std::collections::BTreeMap<String, usize>;

impl Ctx {
    fn device(self) -> bool {
        self.precision == Precision::Device
    }
}

/// Evaluates `graph` on `inputs` (one per graph input, in order, of the input's type) and
/// returns one tensor per graph output; constants take the values their data decodes to. The
/// result does not depend on `threads`.
pub fn evaluate(
    graph: &Graph,
    inputs: &[Tensor],
    precision: Precision,
    threads: usize,
) -> Result<Vec<Tensor>, ReferenceError> {
    evaluate_split(graph, inputs, precision, threads, &DeviceSplits::new())
}

/// [`evaluate`] of a build that splits the matmuls `splits` names over k: in device precision
/// each of them sums its chunks' partials as the device does
/// ([`crate::gemm::matmul_device_k_split`]); the exact precision ignores `splits`.
pub fn evaluate_split(
    graph: &Graph,
    inputs: &[Tensor],
    precision: Precision,
    threads: usize,
    splits: &DeviceSplits,
) -> Result<Vec<Tensor>, ReferenceError> {
    graph.verify()?;
    if inputs.len() != graph.inputs().len() {
        return Err(ReferenceError::InputCount {
            graph: graph.name.clone(),
            expected: graph.inputs().len(),
            got: inputs.len(),
        });
    }
    let threads = threads.max(1);
    // In device precision a fused operation is what the device computes: its expansion
    // (`ipu_graph::expand`), evaluated operation by operation.
    if precision == Precision::Device && ipu_graph::expand::has_fused(graph) {
        let expanded = ipu_graph::expand::expand_fused(graph)?;
        return evaluate_split(&expanded, inputs, precision, threads, splits);
    }
    let _span =
        tracing::info_span!("reference", graph = %graph.name, precision = %precision).entered();
    tracing::info!(threads, "configured host reference GEMM threads={threads}");
    let mut values: Vec<Option<Vec<f32>>> = vec![None; graph.values().len()];
    for (&id, t) in graph.inputs().iter().zip(inputs) {
        let v = graph.value(id);
        if t.ty() != v.ty || t.data.len() != t.elements() {
            return Err(ReferenceError::InputType {
                input: v.name.clone(),
                expected: v.ty.to_string(),
                got: format!("{} with {} values", t.ty(), t.data.len()),
            });
        }
        values[id.0 as usize] = Some(t.data.clone());
    }
    // Constants hold values of their dtype exactly, so both precisions start from the decoded
    // values.
    for c in graph.constants() {
        let ty = &graph.value(c.value).ty;
        values[c.value.0 as usize] = Some(ipu_graph::decode_elements(ty.dtype, c.data.bytes()));
    }
    // Free each value after its last use (outputs are kept).
    let mut last_use = vec![usize::MAX; graph.values().len()];
    for (i, op) in graph.operations().iter().enumerate() {
        for &v in &op.inputs {
            last_use[v.0 as usize] = i;
        }
    }
    for &o in graph.outputs() {
        last_use[o.0 as usize] = usize::MAX;
    }
    let ctx = Ctx {
        precision,
        threads,
        k_splits: 1,
    };
    let started = std::time::Instant::now();
    for (i, op) in graph.operations().iter().enumerate() {
        let ins: Vec<(&[f32], &TensorType)> = op
            .inputs
            .iter()
            .map(|&v| {
                (
                    values[v.0 as usize]
                        .as_deref()
                        .expect("verified graph defines operands first"),
                    &graph.value(v).ty,
                )
            })
            .collect();
        let out_ty = &graph.value(op.outputs[0]).ty;
        let ctx = Ctx {
            k_splits: splits.get(&op.name).copied().unwrap_or(1),
            ..ctx
        };
        let result = run_op(&op.kind, &ins, out_ty, ctx);
        debug_assert_eq!(result.len(), out_ty.elements(), "operation %{}", op.name);
        values[op.outputs[0].0 as usize] = Some(result);
        for &v in &op.inputs {
            if last_use[v.0 as usize] == i {
                values[v.0 as usize] = None;
            }
        }
    }
    tracing::info!(
        elapsed_ms = started.elapsed().as_millis() as u64,
        "evaluated host reference"
    );
    Ok(graph
        .outputs()
        .iter()
        .map(|&o| {
            let v = graph.value(o);
            Tensor {
                dtype: v.ty.dtype,
                shape: v.ty.shape.clone(),
                data: values[o.0 as usize].clone().expect("outputs are kept"),
            }
        })
        .collect())
}

/// A saturating cast to f32, f16 or FNUZ FP8 only rounds: the exact precision keeps the value
/// unrounded, as for any other result.
fn cast_is_rounding(to: DType, overflow: ipu_numerics::Overflow) -> bool {
    let class = to.class();
    class == ipu_graph::DTypeClass::Float
        || (class == ipu_graph::DTypeClass::Fp8 && overflow == ipu_numerics::Overflow::Saturate)
}

/// Integer arithmetic as the device does it: exact, then wrapped by the caller; division
/// truncates toward zero, and `a / 0` is `0xFFFF` with `a`'s sign (what the device's
/// 16-step shift-and-subtract division gives).
fn int_binary(op: &OpKind, a: i64, b: i64) -> i64 {
    match op {
        OpKind::Add => a + b,
        OpKind::Sub => a - b,
        OpKind::Mul => a * b,
        OpKind::Max => a.max(b),
        _ if b == 0 => {
            if a < 0 {
                -0xFFFF
            } else {
                0xFFFF
            }
        }
        _ => a / b,
    }
}

fn binary(
    (a, ta): (&[f32], &TensorType),
    (b, tb): (&[f32], &TensorType),
    out: &TensorType,
    f: impl Fn(f32, f32) -> f32,
) -> Vec<f32> {
    if ta.shape == tb.shape {
        return a.iter().zip(b).map(|(&x, &y)| f(x, y)).collect();
    }
    let sa = broadcast_strides(&ta.shape, &out.shape);
    let sb = broadcast_strides(&tb.shape, &out.shape);
    let mut r = vec![0.0; out.elements()];
    walk(&out.shape, [&sa, &sb], |i, [oa, ob]| r[i] = f(a[oa], b[ob]));
    r
}

/// (outer, len, inner) of `shape` around `axis`.
fn split(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    (
        shape[..axis].iter().product(),
        shape[axis],
        shape[axis + 1..].iter().product(),
    )
}

fn reduce(x: &[f32], ty: &TensorType, axis: usize, sum: bool, ctx: Ctx) -> Vec<f32> {
    let (outer, len, inner) = split(&ty.shape, axis);
    let mut r = vec![0.0; outer * inner];
    for o in 0..outer {
        for i in 0..inner {
            let lane = (0..len).map(|j| x[(o * len + j) * inner + i]);
            r[o * inner + i] = match (sum, ctx.device()) {
                (false, _) => lane.fold(f32::NEG_INFINITY, f32::max),
                (true, true) => lane.fold(0.0f32, |s, v| s + v),
                (true, false) => lane.fold(0.0f64, |s, v| s + f64::from(v)) as f32,
            };
        }
    }
    r
}

/// Softmax of one lane in place (`stride` apart); device: f32, exact: f64.
fn softmax_lane(x: &mut [f32], start: usize, len: usize, stride: usize, device: bool) {
    let idx = |j: usize| start + j * stride;
    let m = (0..len)
        .map(|j| x[idx(j)])
        .fold(f32::NEG_INFINITY, f32::max);
    if (0..len).all(|j| x[idx(j)] == f32::NEG_INFINITY) {
        // Every entry masked: define the result as zeros (a NaN entry is not masked: `max`
        // passes over it, but its row is NaN).
        (0..len).for_each(|j| x[idx(j)] = 0.0);
        return;
    }
    if device {
        let mut s = 0.0f32;
        for j in 0..len {
            let e = (x[idx(j)] - m).exp();
            x[idx(j)] = e;
            s += e;
        }
        (0..len).for_each(|j| x[idx(j)] /= s);
    } else {
        let e: Vec<f64> = (0..len)
            .map(|j| (f64::from(x[idx(j)]) - f64::from(m)).exp())
            .collect();
        let s: f64 = e.iter().sum();
        (0..len).for_each(|j| x[idx(j)] = (e[j] / s) as f32);
    }
}

fn transpose2(x: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut t = vec![0.0; x.len()];
    for r in 0..rows {
        for c in 0..cols {
            t[c * rows + r] = x[r * cols + c];
        }
    }
    t
}

/// The AMP rule of a product of `operands` (FP8 operands go through f16) with `partials`.
fn partials_rule(operands: DType, p: DType) -> AmpRule {
    let partials = if p == DType::F16 {
        Partials::F16
    } else {
        Partials::F32
    };
    AmpRule::new(operands == DType::F32, partials)
}

/// Device operand conversion for matmul-like products: FP8 operands go through f16.
fn device_operand<'a>(x: &'a [f32], ty: &TensorType) -> std::borrow::Cow<'a, [f32]> {
    if ty.dtype.is_fp8() {
        std::borrow::Cow::Owned(x.iter().map(|&v| round_to_f16(v)).collect())
    } else {
        std::borrow::Cow::Borrowed(x)
    }
}

fn matmul(
    (a, ta): (&[f32], &TensorType),
    (b, tb): (&[f32], &TensorType),
    out: &TensorType,
    partials: DType,
    ctx: Ctx,
) -> Vec<f32> {
    let (ra, rb, ro) = (ta.shape.len(), tb.shape.len(), out.shape.len());
    let (m, k, n) = (ta.shape[ra - 2], ta.shape[ra - 1], tb.shape[rb - 1]);
    let batch_shape = &out.shape[..ro - 2];
    // Batch strides of a and b (in matrices), aligned from the right, 0 where broadcast.
    let batch_strides = |shape: &[usize]| -> Vec<usize> {
        let own = &shape[..shape.len() - 2];
        let s = strides(own);
        let pad = batch_shape.len() - own.len();
        (0..batch_shape.len())
            .map(|i| {
                if i < pad || own[i - pad] == 1 {
                    0
                } else {
                    s[i - pad]
                }
            })
            .collect()
    };
    let (sa, sb) = (batch_strides(&ta.shape), batch_strides(&tb.shape));
    let mut pairs = Vec::new();
    if batch_shape.is_empty() {
        pairs.push((0, 0));
    } else {
        walk(batch_shape, [&sa, &sb], |_, [oa, ob]| pairs.push((oa, ob)));
    }
    let mut r = vec![0.0f32; out.elements()];
    let (a, b) = if ctx.device() {
        (device_operand(a, ta), device_operand(b, tb))
    } else {
        (std::borrow::Cow::Borrowed(a), std::borrow::Cow::Borrowed(b))
    };
    for (batch, (oa, ob)) in pairs.into_iter().enumerate() {
        let am = &a[oa * m * k..(oa + 1) * m * k];
        let bm = &b[ob * k * n..(ob + 1) * k * n];
        let cm = &mut r[batch * m * n..(batch + 1) * m * n];
        if ctx.device() {
            matmul_device_k_split(
                am,
                bm,
                cm,
                (m, k, n),
                partials_rule(ta.dtype, partials),
                ctx.k_splits,
                ctx.threads,
            );
        } else {
            let a64: Vec<f64> = am.iter().map(|&x| f64::from(x)).collect();
            let b64: Vec<f64> = bm.iter().map(|&x| f64::from(x)).collect();
            let mut c64 = vec![0.0f64; m * n];
            gemm(&a64, &b64, &mut c64, (m, k, n), ctx.threads);
            cm.iter_mut().zip(&c64).for_each(|(c, &v)| *c = v as f32);
        }
    }
    r
}

struct AttentionShape {
    batches: usize,
    sq: usize,
    sk: usize,
    d: usize,
    dv: usize,
}

fn attention_shape(tq: &TensorType, tk: &TensorType, tv: &TensorType) -> AttentionShape {
    let r = tq.shape.len();
    AttentionShape {
        batches: tq.shape[..r - 2].iter().product(),
        sq: tq.shape[r - 2],
        sk: tk.shape[r - 2],
        d: tq.shape[r - 1],
        dv: tv.shape[r - 1],
    }
}

#[allow(clippy::too_many_arguments)]
fn attention(
    q: (&[f32], &TensorType),
    k: (&[f32], &TensorType),
    v: (&[f32], &TensorType),
    scale: f32,
    causal: bool,
    partials: DType,
    mask: Option<(&[f32], &TensorType)>,
    ctx: Ctx,
) -> Vec<f32> {
    let AttentionShape {
        batches,
        sq,
        sk,
        d,
        dv,
    } = attention_shape(q.1, k.1, v.1);
    // Grouped-query attention: query batch entry `bi` reads kv entry `bi / group`.
    let kv_batches: usize = k.1.shape[..k.1.shape.len() - 2].iter().product();
    let group = batches / kv_batches.max(1);
    // The mask's element strides against the scores `[.., sq, sk]` (0 where it broadcasts).
    let mask_strides = mask.map(|(_, mt)| {
        let r = q.1.shape.len();
        let mut scores = q.1.shape[..r - 1].to_vec();
        scores.push(sk);
        let lead = r - mt.shape.len();
        let mut strides = vec![0usize; r];
        let mut s = 1;
        for i in (0..mt.shape.len()).rev() {
            if mt.shape[i] != 1 {
                strides[lead + i] = s;
            }
            s *= mt.shape[i];
        }
        (scores, strides)
    });
    // The mask's element for score `(bi, i, j)`.
    let mask_at = |bi: usize, i: usize, j: usize| -> Option<f32> {
        let ((m, _), (scores, strides)) = (mask?, mask_strides.as_ref()?);
        let r = scores.len();
        let mut at = i * strides[r - 2] + j * strides[r - 1];
        let mut rest = bi;
        for dim in (0..r - 2).rev() {
            at += (rest % scores[dim]) * strides[dim];
            rest /= scores[dim];
        }
        Some(m[at])
    };
    let bool_mask = mask.is_some_and(|(_, t)| t.dtype == DType::Bool);
    assert!(
        !ctx.device() || mask.is_none(),
        "the device precision evaluates a masked flash attention's expansion"
    );
    let mut out = vec![0.0f32; batches * sq * dv];
    let (qd, kd, vd) = if ctx.device() {
        (
            device_operand(q.0, q.1),
            device_operand(k.0, k.1),
            device_operand(v.0, v.1),
        )
    } else {
        (q.0.into(), k.0.into(), v.0.into())
    };
    for bi in 0..batches {
        let qm = &qd[bi * sq * d..(bi + 1) * sq * d];
        let kvi = bi / group;
        let km = &kd[kvi * sk * d..(kvi + 1) * sk * d];
        let vm = &vd[kvi * sk * dv..(kvi + 1) * sk * dv];
        let om = &mut out[bi * sq * dv..(bi + 1) * sq * dv];
        let kt = transpose2(km, sk, d);
        let masked = |i: usize, j: usize| causal && j > i;
        if ctx.device() {
            let rule = partials_rule(q.1.dtype, partials);
            let mut s = vec![0.0f32; sq * sk];
            matmul_device(qm, &kt, &mut s, (sq, d, sk), rule, ctx.threads);
            round_slice(partials, &mut s);
            for i in 0..sq {
                for j in 0..sk {
                    let t = &mut s[i * sk + j];
                    *t = if masked(i, j) {
                        f32::NEG_INFINITY
                    } else {
                        *t * scale
                    };
                }
            }
            round_slice(partials, &mut s);
            for i in 0..sq {
                softmax_lane(&mut s, i * sk, sk, 1, true);
            }
            round_slice(partials, &mut s);
            // The probabilities are in the partials type: with f32 partials the product with v
            // runs in the AMP's f32 mode (v is converted to f32 exactly).
            let pv_rule = partials_rule(partials, partials);
            matmul_device(&s, vm, om, (sq, sk, dv), pv_rule, ctx.threads);
        } else {
            let q64: Vec<f64> = qm.iter().map(|&x| f64::from(x)).collect();
            let kt64: Vec<f64> = kt.iter().map(|&x| f64::from(x)).collect();
            let mut s = vec![0.0f64; sq * sk];
            gemm(&q64, &kt64, &mut s, (sq, d, sk), ctx.threads);
            for i in 0..sq {
                let row = &mut s[i * sk..(i + 1) * sk];
                let mut mx = f64::NEG_INFINITY;
                for (j, x) in row.iter_mut().enumerate() {
                    let hidden = masked(i, j) || (bool_mask && mask_at(bi, i, j) == Some(0.0));
                    *x = if hidden {
                        f64::NEG_INFINITY
                    } else if bool_mask {
                        *x * f64::from(scale)
                    } else {
                        *x * f64::from(scale) + mask_at(bi, i, j).map_or(0.0, f64::from)
                    };
                    mx = mx.max(*x);
                }
                let mut sum = 0.0;
                for x in row.iter_mut() {
                    *x = if mx == f64::NEG_INFINITY {
                        0.0
                    } else {
                        (*x - mx).exp()
                    };
                    sum += *x;
                }
                if sum > 0.0 {
                    row.iter_mut().for_each(|x| *x /= sum);
                }
            }
            let v64: Vec<f64> = vm.iter().map(|&x| f64::from(x)).collect();
            let mut o64 = vec![0.0f64; sq * dv];
            gemm(&s, &v64, &mut o64, (sq, sk, dv), ctx.threads);
            om.iter_mut().zip(&o64).for_each(|(o, &x)| *o = x as f32);
        }
    }
    out
}

fn run_op(kind: &OpKind, ins: &[(&[f32], &TensorType)], out: &TensorType, ctx: Ctx) -> Vec<f32> {
    let device = ctx.device();
    let mut r = match kind {
        OpKind::MatMul { partials, .. } => matmul(ins[0], ins[1], out, *partials, ctx),
        OpKind::Transpose { perm } => {
            let (x, t) = ins[0];
            let s = strides(&t.shape);
            let permuted: Vec<usize> = perm.iter().map(|&p| s[p]).collect();
            let mut r = vec![0.0; out.elements()];
            walk(&out.shape, [&permuted], |i, [o]| r[i] = x[o]);
            return r;
        }
        OpKind::Reshape { .. } => return ins[0].0.to_vec(),
        OpKind::Slice { axis, start, end } => {
            let (x, t) = ins[0];
            let (outer, len, inner) = split(&t.shape, *axis);
            let mut r = Vec::with_capacity(out.elements());
            for o in 0..outer {
                r.extend_from_slice(&x[(o * len + start) * inner..(o * len + end) * inner]);
            }
            return r;
        }
        OpKind::Gather { axis } => {
            let ((x, t), (idx, _)) = (ins[0], ins[1]);
            let (outer, len, inner) = split(&t.shape, *axis);
            let mut r = Vec::with_capacity(out.elements());
            for o in 0..outer {
                for &i in idx {
                    // Negative indices count from the end; others outside the table read zeros,
                    // as on the device.
                    let i = i as i64;
                    let i = if i < 0 { i + len as i64 } else { i };
                    if (0..len as i64).contains(&i) {
                        let at = (o * len + i as usize) * inner;
                        r.extend_from_slice(&x[at..at + inner]);
                    } else {
                        r.extend(std::iter::repeat_n(0.0, inner));
                    }
                }
            }
            return r;
        }
        OpKind::GatherColumns => {
            let ((x, t), (idx, _)) = (ins[0], ins[1]);
            let (h, len) = (t.shape[0], t.shape[1]);
            let mut r = Vec::with_capacity(out.elements());
            for &i in idx {
                // As `gather`: negative indices count from the end, others outside read zeros.
                let i = i as i64;
                let i = if i < 0 { i + len as i64 } else { i };
                if (0..len as i64).contains(&i) {
                    r.extend((0..h).map(|c| x[c * len + i as usize]));
                } else {
                    r.extend(std::iter::repeat_n(0.0, h));
                }
            }
            return r;
        }
        OpKind::Concat { axis } => {
            let (outer, _, inner) = split(&out.shape, *axis);
            let mut r = Vec::with_capacity(out.elements());
            for o in 0..outer {
                for (x, t) in ins {
                    let len = t.shape[*axis];
                    r.extend_from_slice(&x[o * len * inner..(o + 1) * len * inner]);
                }
            }
            return r;
        }
        OpKind::Add | OpKind::Sub | OpKind::Mul | OpKind::Div | OpKind::Max
            if out.dtype.int_format().is_some() =>
        {
            let f = out.dtype.int_format().expect("integer");
            let op = kind.clone();
            binary(ins[0], ins[1], out, move |a, b| {
                f.wrap(int_binary(&op, a as i64, b as i64)) as f32
            })
        }
        OpKind::Add => binary(ins[0], ins[1], out, |a, b| a + b),
        OpKind::Sub => binary(ins[0], ins[1], out, |a, b| a - b),
        OpKind::Mul => binary(ins[0], ins[1], out, |a, b| a * b),
        // The device divides as `a * (1 / b)` in f32 (`rcp`, then `mul`).
        OpKind::Div if device => binary(ins[0], ins[1], out, |a, b| a * (1.0 / b)),
        OpKind::Div => binary(ins[0], ins[1], out, |a, b| a / b),
        OpKind::Max => binary(ins[0], ins[1], out, f32::max),
        OpKind::Scale { factor } => ins[0].0.iter().map(|&x| x * factor).collect(),
        OpKind::Map(f) => {
            let mut args = [0.0f32; 3];
            return (0..out.elements())
                .map(|i| {
                    for (k, (x, _)) in ins.iter().enumerate() {
                        args[k] = x[i];
                    }
                    f.eval(&args[..ins.len()])
                })
                .collect();
        }
        OpKind::Unary(f) if device => ins[0].0.iter().map(|&x| f.device(x)).collect(),
        OpKind::Unary(f) => ins[0].0.iter().map(|&x| f.exact(x)).collect(),
        OpKind::CausalMask { key_start } => {
            let (x, t) = ins[0];
            let n = t.shape.len();
            let (rows, keys) = (t.shape[n - 2], t.shape[n - 1]);
            x.iter()
                .enumerate()
                .map(|(e, &v)| {
                    let (i, j) = ((e / keys) % rows, e % keys);
                    if key_start + j > i {
                        f32::NEG_INFINITY
                    } else {
                        v
                    }
                })
                .collect()
        }
        OpKind::ReduceMax { axis } => reduce(ins[0].0, ins[0].1, *axis, false, ctx),
        OpKind::ReduceSum { axis } => reduce(ins[0].0, ins[0].1, *axis, true, ctx),
        OpKind::Softmax { axis } => {
            let (outer, len, inner) = split(&ins[0].1.shape, *axis);
            let mut r = ins[0].0.to_vec();
            for o in 0..outer {
                for i in 0..inner {
                    softmax_lane(&mut r, o * len * inner + i, len, inner, device);
                }
            }
            r
        }
        // Conversions to integers, bool, the stored formats, and without saturation are the
        // operation's meaning, in both precisions.
        // They hold values of the target already (infinities included, which a second,
        // saturating rounding would change).
        OpKind::Cast { to, overflow } if !cast_is_rounding(*to, *overflow) => {
            return ins[0]
                .0
                .iter()
                .map(|&x| crate::convert(*to, *overflow, x))
                .collect();
        }
        OpKind::Cast { .. } => ins[0].0.to_vec(),
        OpKind::LayerNorm { epsilon } => {
            let (x, t) = ins[0];
            let n = *t.shape.last().expect("rank >= 1");
            let mut r = x.to_vec();
            if n > 0 {
                for row in r.chunks_mut(n) {
                    if device {
                        let mean = row.iter().fold(0.0f32, |s, &v| s + v) / n as f32;
                        let var =
                            row.iter().fold(0.0f32, |s, &v| s + (v - mean) * (v - mean)) / n as f32;
                        let inv = (var + epsilon).sqrt();
                        row.iter_mut().for_each(|v| *v = (*v - mean) / inv);
                    } else {
                        let mean = row.iter().map(|&v| f64::from(v)).sum::<f64>() / n as f64;
                        let var = row
                            .iter()
                            .map(|&v| (f64::from(v) - mean).powi(2))
                            .sum::<f64>()
                            / n as f64;
                        let inv = (var + f64::from(*epsilon)).sqrt();
                        row.iter_mut()
                            .for_each(|v| *v = ((f64::from(*v) - mean) / inv) as f32);
                    }
                }
            }
            r
        }
        OpKind::Attention {
            scale,
            causal,
            partials,
            ..
        } => attention(
            ins[0], ins[1], ins[2], *scale, *causal, *partials, None, ctx,
        ),
        // Only the exact precision meets a fused operation (the device precision evaluates its
        // expansion): attention computed directly, without blocks.
        OpKind::FlashAttention {
            scale,
            causal,
            partials,
            ..
        } => attention(
            ins[0],
            ins[1],
            ins[2],
            *scale,
            *causal,
            *partials,
            ins.get(3).copied(),
            ctx,
        ),
    };
    if device {
        round_slice(out.dtype, &mut r);
    }
    r
}
