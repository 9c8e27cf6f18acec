//! Shape and type inference: the output type of an operation from its operand types and
//! attributes, or why the combination is invalid.
//!
//! Elementwise binary operations broadcast by one simple rule: both operands have the same rank
//! and dtype, and in every dimension the sizes are equal or one of them is 1 (that operand is
//! repeated). Reductions keep the reduced axis with size 1, so `sub(x, reduce_max(x))`
//! broadcasts without a reshape.

use crate::{DType, OpKind, TensorType};

/// Why inference failed; `operand` is the index of the offending operand, if one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InferError {
    /// Offending operand index.
    pub operand: Option<usize>,
    /// What is wrong.
    pub reason: String,
}

fn err<T>(operand: Option<usize>, reason: impl Into<String>) -> Result<T, InferError> {
    Err(InferError {
        operand,
        reason: reason.into(),
    })
}

fn arity(inputs: &[&TensorType], n: usize) -> Result<(), InferError> {
    if inputs.len() != n {
        return err(None, format!("takes {n} operands, got {}", inputs.len()));
    }
    Ok(())
}

fn check_axis(t: &TensorType, axis: usize, operand: usize) -> Result<(), InferError> {
    if axis >= t.shape.len() {
        return err(
            Some(operand),
            format!("axis {axis} out of range for rank {} ({t})", t.shape.len()),
        );
    }
    Ok(())
}

fn check_dtype(d: DType) -> Result<(), InferError> {
    d.check().map_err(|reason| InferError {
        operand: None,
        reason,
    })
}

/// The dtype class of a matmul or attention operand: f32, f16, or FP8 (other dtypes are
/// refused by [`check_classes`]).
fn operand_class(d: DType) -> u8 {
    match d {
        DType::F32 => 0,
        DType::F16 => 1,
        _ => 2,
    }
}

/// Which dtypes an operation takes: casts and data movement any; elementwise `add`, `sub`,
/// `mul`, `div` and `max` floats, FP8 and integers (not bool); everything else (matmuls,
/// attention, transcendentals, reductions, softmax, layer norm, masks) f32, f16 and FP8 only.
/// bf16 and the OCP and MX formats are stored and converted, not computed in.
fn check_classes(kind: &OpKind, inputs: &[&TensorType]) -> Result<(), InferError> {
    use crate::DTypeClass;
    let movement = matches!(
        kind,
        OpKind::Cast { .. }
            | OpKind::Transpose { .. }
            | OpKind::Reshape { .. }
            | OpKind::Slice { .. }
            | OpKind::Concat { .. }
            | OpKind::Gather { .. }
            | OpKind::GatherColumns
            | OpKind::Map(_)
    );
    if let OpKind::Cast { to, .. } = kind {
        // 32-bit integers convert through f32 (exact within the graph's `±2^24`); 64-bit ones
        // are moved only.
        let wide = |d: DType| matches!(d, DType::I64 | DType::U64);
        if wide(*to) || inputs.iter().any(|t| wide(t.dtype)) {
            return err(
                Some(0),
                "casts to and from 64-bit integers are not lowered (they are moved only)",
            );
        }
    }
    if movement {
        return Ok(());
    }
    let integer_ok = matches!(
        kind,
        OpKind::Add | OpKind::Sub | OpKind::Mul | OpKind::Div | OpKind::Max
    );
    for (i, t) in inputs.iter().enumerate() {
        // A flash attention's mask (operand 3) is bool or an additive float mask.
        if matches!(kind, OpKind::FlashAttention { .. }) && i == 3 {
            if t.dtype != DType::Bool && !t.dtype.is_float() {
                return err(
                    Some(3),
                    format!(
                        "the mask of flash_attention is bool or an additive f32 or f16 mask, not {}",
                        t.dtype
                    ),
                );
            }
            continue;
        }
        let ok = match t.dtype.class() {
            DTypeClass::Float | DTypeClass::Fp8 => true,
            DTypeClass::Int(_) => integer_ok && t.dtype != DType::Bool,
            DTypeClass::Stored | DTypeClass::Wide => false,
        };
        if !ok {
            let what = if integer_ok {
                "f32, f16, FP8 (f143, f152) or integer"
            } else {
                "f32, f16 or FP8 (f143, f152)"
            };
            return err(
                Some(i),
                format!(
                    "{} takes {what} operands, not {}: cast first",
                    kind.mnemonic(),
                    t.dtype
                ),
            );
        }
    }
    Ok(())
}

fn check_partials(partials: DType, operands: &[(usize, DType)]) -> Result<(), InferError> {
    match partials {
        DType::F32 => Ok(()),
        DType::F16 => {
            if let Some((i, d)) = operands.iter().find(|(_, d)| *d == DType::F32) {
                return err(
                    Some(*i),
                    format!("f16 partials need f16 or FP8 operands, got {d}"),
                );
            }
            Ok(())
        }
        other => err(None, format!("partials must be f32 or f16, got {other}")),
    }
}

/// Broadcast shape of two equal-rank shapes, or `None`.
pub fn broadcast_shape(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    if a.len() != b.len() {
        return None;
    }
    a.iter()
        .zip(b)
        .map(|(&x, &y)| match (x, y) {
            _ if x == y => Some(x),
            (1, _) => Some(y),
            (_, 1) => Some(x),
            _ => None,
        })
        .collect()
}

/// Output type of `kind` applied to operands of types `inputs`.
pub fn infer(kind: &OpKind, inputs: &[&TensorType]) -> Result<TensorType, InferError> {
    for (i, t) in inputs.iter().enumerate() {
        t.check().map_err(|reason| InferError {
            operand: Some(i),
            reason,
        })?;
    }
    check_classes(kind, inputs)?;
    let out = infer_unchecked(kind, inputs)?;
    out.check().map_err(|reason| InferError {
        operand: None,
        reason,
    })?;
    Ok(out)
}

fn infer_unchecked(kind: &OpKind, inputs: &[&TensorType]) -> Result<TensorType, InferError> {
    match kind {
        OpKind::MatMul { partials, out } => {
            arity(inputs, 2)?;
            let (a, b) = (inputs[0], inputs[1]);
            for (i, t) in [a, b].iter().enumerate() {
                if t.shape.len() < 2 {
                    return err(Some(i), format!("matmul operands need rank >= 2, got {t}"));
                }
            }
            if operand_class(a.dtype) != operand_class(b.dtype) {
                return err(
                    Some(1),
                    format!("operand dtypes {} and {} do not match", a.dtype, b.dtype),
                );
            }
            check_partials(*partials, &[(0, a.dtype)])?;
            check_dtype(*out)?;
            let (ra, rb) = (a.shape.len(), b.shape.len());
            let (m, ka) = (a.shape[ra - 2], a.shape[ra - 1]);
            let (kb, n) = (b.shape[rb - 2], b.shape[rb - 1]);
            if ka != kb {
                return err(
                    Some(1),
                    format!("inner dimensions differ: {a} x {b} ({ka} vs {kb})"),
                );
            }
            // Batch dimensions: aligned from the right, equal or 1.
            let batch_rank = (ra - 2).max(rb - 2);
            let mut shape = Vec::with_capacity(batch_rank + 2);
            for i in 0..batch_rank {
                let da = (i + (ra - 2))
                    .checked_sub(batch_rank)
                    .map_or(1, |j| a.shape[j]);
                let db = (i + (rb - 2))
                    .checked_sub(batch_rank)
                    .map_or(1, |j| b.shape[j]);
                if da != db && da != 1 && db != 1 {
                    return err(Some(1), format!("batch dimensions differ: {a} x {b}"));
                }
                shape.push(da.max(db));
            }
            shape.extend([m, n]);
            Ok(TensorType::new(*out, shape))
        }
        OpKind::Transpose { perm } => {
            arity(inputs, 1)?;
            let x = inputs[0];
            let mut seen = vec![false; x.shape.len()];
            if perm.len() != x.shape.len()
                || !perm
                    .iter()
                    .all(|&p| p < seen.len() && !std::mem::replace(&mut seen[p], true))
            {
                return err(
                    None,
                    format!(
                        "perm {perm:?} is not a permutation of the {} dims of {x}",
                        x.shape.len()
                    ),
                );
            }
            Ok(TensorType::new(
                x.dtype,
                perm.iter().map(|&p| x.shape[p]).collect::<Vec<_>>(),
            ))
        }
        OpKind::Reshape { shape } => {
            arity(inputs, 1)?;
            let x = inputs[0];
            let n = shape.iter().fold(1usize, |n, &d| n.saturating_mul(d));
            if n != x.elements() {
                return err(
                    None,
                    format!(
                        "shape {shape:?} has {n} elements but {x} has {}",
                        x.elements()
                    ),
                );
            }
            Ok(TensorType::new(x.dtype, shape.clone()))
        }
        OpKind::Slice { axis, start, end } => {
            arity(inputs, 1)?;
            let x = inputs[0];
            check_axis(x, *axis, 0)?;
            if start >= end || *end > x.shape[*axis] {
                return err(
                    None,
                    format!(
                        "slice {start}..{end} is empty or outside 0..{} on axis {axis}",
                        x.shape[*axis]
                    ),
                );
            }
            let mut shape = x.shape.clone();
            shape[*axis] = end - start;
            Ok(TensorType::new(x.dtype, shape))
        }
        OpKind::Gather { axis } => {
            arity(inputs, 2)?;
            let (x, idx) = (inputs[0], inputs[1]);
            check_axis(x, *axis, 0)?;
            if idx.dtype != DType::I32 {
                return err(
                    Some(1),
                    format!("gather indices are i32, not {}", idx.dtype),
                );
            }
            let mut shape = x.shape[..*axis].to_vec();
            shape.extend_from_slice(&idx.shape);
            shape.extend_from_slice(&x.shape[axis + 1..]);
            Ok(TensorType::new(x.dtype, shape))
        }
        OpKind::GatherColumns => {
            arity(inputs, 2)?;
            let (x, idx) = (inputs[0], inputs[1]);
            if x.shape.len() != 2 {
                return err(
                    Some(0),
                    format!("a table of columns is 2-D, not {:?}", x.shape),
                );
            }
            if idx.dtype != DType::I32 {
                return err(
                    Some(1),
                    format!("gather indices are i32, not {}", idx.dtype),
                );
            }
            let mut shape = idx.shape.clone();
            shape.push(x.shape[0]);
            Ok(TensorType::new(x.dtype, shape))
        }
        OpKind::Concat { axis } => {
            if inputs.is_empty() {
                return err(None, "takes at least 1 operand, got 0");
            }
            let first = inputs[0];
            check_axis(first, *axis, 0)?;
            let mut shape = first.shape.clone();
            for (i, t) in inputs.iter().enumerate().skip(1) {
                let same_other = t.shape.len() == first.shape.len()
                    && t.shape
                        .iter()
                        .zip(&first.shape)
                        .enumerate()
                        .all(|(d, (x, y))| d == *axis || x == y);
                if t.dtype != first.dtype || !same_other {
                    return err(
                        Some(i),
                        format!("{t} does not concatenate with {first} along axis {axis}"),
                    );
                }
                shape[*axis] += t.shape[*axis];
            }
            Ok(TensorType::new(first.dtype, shape))
        }
        OpKind::Add | OpKind::Sub | OpKind::Mul | OpKind::Div | OpKind::Max => {
            arity(inputs, 2)?;
            let (a, b) = (inputs[0], inputs[1]);
            if a.dtype != b.dtype {
                return err(
                    Some(1),
                    format!("dtype {} differs from {}", b.dtype, a.dtype),
                );
            }
            let shape = broadcast_shape(&a.shape, &b.shape).ok_or_else(|| InferError {
                operand: Some(1),
                reason: format!(
                    "shapes {a} and {b} do not broadcast (same rank, each dim equal or 1)"
                ),
            })?;
            Ok(TensorType::new(a.dtype, shape))
        }
        OpKind::Scale { factor } => {
            arity(inputs, 1)?;
            if !factor.is_finite() {
                return err(None, format!("factor {factor} is not finite"));
            }
            Ok(inputs[0].clone())
        }
        OpKind::Unary(_) => {
            arity(inputs, 1)?;
            Ok(inputs[0].clone())
        }
        OpKind::Map(f) => {
            arity(inputs, f.arity())?;
            let first = inputs[0];
            for (i, t) in inputs.iter().enumerate() {
                if t.shape != first.shape {
                    return err(
                        Some(i),
                        format!("{t} has not the shape of {first} (broadcast first)"),
                    );
                }
                let computable = match t.dtype.class() {
                    crate::DTypeClass::Float | crate::DTypeClass::Int(_) => true,
                    crate::DTypeClass::Wide => matches!(t.dtype, DType::I32 | DType::U32),
                    _ => false,
                };
                if !computable {
                    return err(
                        Some(i),
                        format!(
                            "{} takes floats, integers or bool, not {}",
                            f.mnemonic(),
                            t.dtype
                        ),
                    );
                }
                if f.takes_bools() && t.dtype != DType::Bool {
                    return err(
                        Some(i),
                        format!("{} takes bool, not {}", f.mnemonic(), t.dtype),
                    );
                }
            }
            match f {
                crate::MapFn::Where => {
                    if first.dtype != DType::Bool {
                        return err(
                            Some(0),
                            format!("the condition is bool, not {}", first.dtype),
                        );
                    }
                    if inputs[1].dtype != inputs[2].dtype {
                        return err(
                            Some(2),
                            format!("{} and {} differ", inputs[1].dtype, inputs[2].dtype),
                        );
                    }
                    Ok(inputs[1].clone())
                }
                _ => {
                    if inputs.iter().any(|t| t.dtype != first.dtype) {
                        return err(Some(1), "the operands' dtypes differ");
                    }
                    Ok(TensorType::new(DType::Bool, first.shape.clone()))
                }
            }
        }
        OpKind::CausalMask { .. } => {
            arity(inputs, 1)?;
            let t = inputs[0];
            if t.shape.len() < 2 {
                return err(
                    Some(0),
                    format!("{t} has rank below 2: no rows and keys to mask"),
                );
            }
            if !matches!(t.dtype, DType::F32 | DType::F16) {
                return err(
                    Some(0),
                    format!("{t}: a mask needs -inf, which only f32 and f16 have"),
                );
            }
            Ok(t.clone())
        }
        OpKind::ReduceMax { axis } | OpKind::ReduceSum { axis } => {
            arity(inputs, 1)?;
            check_axis(inputs[0], *axis, 0)?;
            let mut t = inputs[0].clone();
            t.shape[*axis] = 1;
            Ok(t)
        }
        OpKind::Softmax { axis } => {
            arity(inputs, 1)?;
            check_axis(inputs[0], *axis, 0)?;
            Ok(inputs[0].clone())
        }
        OpKind::Cast { to, .. } => {
            arity(inputs, 1)?;
            check_dtype(*to)?;
            Ok(TensorType::new(*to, inputs[0].shape.clone()))
        }
        OpKind::LayerNorm { epsilon } => {
            arity(inputs, 1)?;
            if inputs[0].shape.is_empty() {
                return err(Some(0), "layer_norm needs rank >= 1");
            }
            if !(epsilon.is_finite() && *epsilon >= 0.0) {
                return err(None, format!("epsilon {epsilon} must be finite and >= 0"));
            }
            Ok(inputs[0].clone())
        }
        OpKind::Attention {
            scale,
            causal,
            partials,
            out,
        }
        | OpKind::FlashAttention {
            scale,
            causal,
            partials,
            out,
            ..
        } => {
            let flash = matches!(kind, OpKind::FlashAttention { .. });
            if !(flash && inputs.len() == 4) {
                arity(inputs, 3)?;
            }
            if let OpKind::FlashAttention {
                block_q, block_k, ..
            } = kind
                && (*block_q == 0 || *block_k == 0)
            {
                return err(None, "block sizes must be at least 1");
            }
            if !scale.is_finite() {
                return err(None, format!("scale {scale} is not finite"));
            }
            let (q, k, v) = (inputs[0], inputs[1], inputs[2]);
            let r = q.shape.len();
            for (i, t) in [q, k, v].iter().enumerate() {
                if t.shape.len() != r || r < 2 {
                    return err(
                        Some(i),
                        format!("q, k and v need the same rank >= 2, got {q}, {k}, {v}"),
                    );
                }
                // Grouped-query attention (flash only): k and v may have fewer heads (the
                // dimension before the sequence) than q, a divisor of q's; query head `h`
                // reads kv head `h / (q heads / kv heads)`.
                let gqa = flash && i > 0 && r >= 3 && t.shape[..r - 3] == q.shape[..r - 3];
                if gqa && t.shape[r - 3] != q.shape[r - 3] {
                    let (hq, hkv) = (q.shape[r - 3], t.shape[r - 3]);
                    if hkv == 0 || hq % hkv != 0 {
                        return err(
                            Some(i),
                            format!(
                                "{} has {hkv} kv heads, which does not divide the {hq} heads of q {q}",
                                ["q", "k", "v"][i]
                            ),
                        );
                    }
                    continue;
                }
                if t.shape[..r - 2] != q.shape[..r - 2] {
                    return err(
                        Some(i),
                        format!("batch dimensions of {t} differ from q {q}"),
                    );
                }
            }
            if flash && k.shape[..r - 2] != v.shape[..r - 2] {
                return err(
                    Some(2),
                    format!("the heads of v {v} differ from those of k {k}"),
                );
            }
            if let Some(m) = inputs.get(3) {
                // Broadcastable to the scores `[.., heads, sq, sk]`, aligned from the right.
                let mut scores = q.shape[..r - 1].to_vec();
                scores.push(k.shape[r - 2]);
                let fits = m.shape.len() >= 2
                    && m.shape.len() <= r
                    && m.shape
                        .iter()
                        .rev()
                        .zip(scores.iter().rev())
                        .all(|(&a, &b)| a == b || a == 1);
                if !fits {
                    let scores = TensorType::new(m.dtype, scores);
                    return err(
                        Some(3),
                        format!(
                            "the mask {m} does not broadcast to the scores {scores} (rank 2 to {r}, every dimension equal or 1)"
                        ),
                    );
                }
            }
            if k.shape[r - 1] != q.shape[r - 1] {
                return err(
                    Some(1),
                    format!("head dimension of k {k} differs from q {q}"),
                );
            }
            if v.shape[r - 2] != k.shape[r - 2] {
                return err(
                    Some(2),
                    format!("sequence length of v {v} differs from k {k}"),
                );
            }
            if *causal && q.shape[r - 2] != k.shape[r - 2] {
                return err(
                    Some(1),
                    "causal attention needs equal query and key lengths",
                );
            }
            check_partials(*partials, &[(0, q.dtype), (1, k.dtype), (2, v.dtype)])?;
            // The scores are a matmul of q and kᵀ: their operands share a class.
            if operand_class(q.dtype) != operand_class(k.dtype) {
                return err(
                    Some(1),
                    format!(
                        "q and k dtypes {} and {} do not match (the scores are the matmul of q and kᵀ)",
                        q.dtype, k.dtype
                    ),
                );
            }
            // The fused kernels take f32 operands throughout or none.
            if matches!(kind, OpKind::FlashAttention { .. })
                && let Some(i) = [q, k, v]
                    .iter()
                    .position(|t| (t.dtype == DType::F32) != (q.dtype == DType::F32))
            {
                return err(
                    Some(i),
                    format!(
                        "flash attention needs q, k and v all f32 or none f32, got {}, {} and {}",
                        q.dtype, k.dtype, v.dtype
                    ),
                );
            }
            check_dtype(*out)?;
            let mut shape = q.shape.clone();
            shape[r - 1] = v.shape[r - 1];
            Ok(TensorType::new(*out, shape))
        }
    }
}
