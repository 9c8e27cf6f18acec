//! Expansion of fused operations into the operations they are made of.
//!
//! `flash_attention` becomes, per key block of `block_k` keys, a blocked `q kᵀ`, the running
//! row maximum, `exp` of the shifted scores, the running row sum with rescaling, the `p v`
//! accumulation with rescaling, and a final normalisation. No value of the expansion holds a
//! whole score matrix: the largest is one block of scores, `[.., sq, block_k]`. The compiler
//! lowers the expansion; the host reference's device precision evaluates the same expansion,
//! so the device's result is defined operation by operation.
//!
//! For key block `j` (keys `k0..k1`), with `P` the partials dtype:
//! ```text
//! s_j   = matmul(q, kᵀ[.., :, k0..k1]) {partials = P}: P        (kᵀ once: transpose of k)
//! t_j   = scale(s_j)
//! t_j   = causal_mask(t_j) {key_start = k0}                     (causal only)
//! m_j   = max(m_{j-1}, reduce_max(t_j))                         (m_0 = reduce_max(t_0))
//! a_j   = exp(m_{j-1} - m_j)                                     (j > 0)
//! p_j   = exp(t_j - m_j)
//! l_j   = l_{j-1} * a_j + reduce_sum(p_j)                        (l_0 = reduce_sum(p_0))
//! o_j   = o_{j-1} * a_j + matmul(p_j in A, v'[.., k0..k1, :]) {partials = P}
//! out   = cast(o_last / l_last) to the output dtype
//! ```
//! `A`, the operand type of the products, is f32 for f32 inputs and f16 otherwise (`v' = v`
//! in `A`): probabilities are rounded to f16 before the `p v` product, as on the AMP.
//!
//! `block_q` does not change the numbers (it is a tiling hint). With a causal mask, `t_j` is
//! masked (`causal_mask {key_start = k0}`: keys after the query become `-inf`) before the row
//! maximum; a row whose keys in a block are all masked keeps its maximum, gains nothing from
//! the block (`exp(-inf) = 0`) and is rescaled by `exp(0) = 1`.

use crate::{DType, Graph, GraphBuilder, GraphError, OpKind, UnaryFn, ValueId};

/// Whether `graph` has an operation [`expand_fused`] rewrites.
pub fn has_fused(graph: &Graph) -> bool {
    graph
        .operations()
        .iter()
        .any(|o| matches!(o.kind, OpKind::FlashAttention { .. }))
}

/// Rewrites every `flash_attention` of `graph` into its blocked operations (see the module
/// docs). Other operations, inputs, constants and outputs keep their names and order.
pub fn expand_fused(graph: &Graph) -> Result<Graph, GraphError> {
    let mut b = GraphBuilder::new(graph.name.clone());
    let mut map: Vec<Option<ValueId>> = vec![None; graph.values().len()];
    for &i in graph.inputs() {
        let v = graph.value(i);
        map[i.0 as usize] = Some(b.input(v.name.clone(), v.ty.clone()));
    }
    for c in graph.constants() {
        let v = graph.value(c.value);
        map[c.value.0 as usize] = Some(b.constant(v.name.clone(), v.ty.clone(), c.data.clone())?);
    }
    for op in graph.operations() {
        let ins: Vec<ValueId> = op
            .inputs
            .iter()
            .map(|v| map[v.0 as usize].expect("defined"))
            .collect();
        let out = match &op.kind {
            OpKind::FlashAttention {
                scale,
                causal,
                block_k,
                partials,
                out,
                ..
            } => flash(
                &mut b, &op.name, &ins, *scale, *causal, *block_k, *partials, *out,
            )?,
            kind => b.op(op.name.clone(), kind.clone(), &ins)?,
        };
        map[op.outputs[0].0 as usize] = Some(out);
    }
    for &o in graph.outputs() {
        b.output(map[o.0 as usize].expect("defined"));
    }
    b.finish()
}

#[allow(clippy::too_many_arguments)]
fn flash(
    b: &mut GraphBuilder,
    name: &str,
    ins: &[ValueId],
    scale: f32,
    causal: bool,
    block_k: usize,
    partials: DType,
    out: DType,
) -> Result<ValueId, GraphError> {
    let (mut q, mut k, mut v) = (ins[0], ins[1], ins[2]);
    let q_shape = b.ty(q).shape.clone();
    let mut rank = q_shape.len();
    let sk = b.ty(k).shape[rank - 2];
    // The mask as an additive mask in the partials type, of the scores' rank.
    let mut mask = match ins.get(3) {
        Some(&m) => Some(additive_mask(b, name, m, rank, partials)?),
        None => None,
    };
    // Grouped-query attention: the heads split into `[kv heads, group]`, k and v broadcast
    // over the group (a size-1 dimension), so every product is that of the ungrouped form.
    let group = if rank >= 3 {
        q_shape[rank - 3] / b.ty(k).shape[rank - 3]
    } else {
        1
    };
    if group > 1 {
        let split = |b: &mut GraphBuilder, x: ValueId, what: &str, inner: usize| {
            let mut shape = b.ty(x).shape.clone();
            let heads = shape[rank - 3];
            shape.splice(rank - 3..rank - 2, [heads / inner, inner]);
            b.op(
                format!("{name}.{what}_grouped"),
                OpKind::Reshape { shape },
                &[x],
            )
        };
        q = split(b, q, "q", group)?;
        k = split(b, k, "k", 1)?;
        v = split(b, v, "v", 1)?;
        if let Some(m) = mask {
            let inner = if b.ty(m).shape[rank - 3] == 1 {
                1
            } else {
                group
            };
            mask = Some(split(b, m, "mask", inner)?);
        }
        rank += 1;
    }
    let block = block_k.clamp(1, sk);
    let mut perm: Vec<usize> = (0..rank).collect();
    perm.swap(rank - 2, rank - 1);
    let kt = b.op(format!("{name}.kt"), OpKind::Transpose { perm }, &[k])?;
    // The operand type of the `p v` product: f32 for f32 inputs, else f16 (FP8 is widened).
    let operand = if b.ty(v).dtype == DType::F32 {
        DType::F32
    } else {
        DType::F16
    };
    let vp = if b.ty(v).dtype == operand {
        v
    } else {
        b.op(format!("{name}.v"), OpKind::cast(operand), &[v])?
    };
    let mm = OpKind::MatMul {
        partials,
        out: partials,
    };
    let (mut m, mut l, mut o): (Option<ValueId>, Option<ValueId>, Option<ValueId>) =
        (None, None, None);
    for (j, k0) in (0..sk).step_by(block).enumerate() {
        let k1 = (k0 + block).min(sk);
        let n = |what: &str| format!("{name}.{what}{j}");
        let ktj = b.op(
            n("kt"),
            OpKind::Slice {
                axis: rank - 1,
                start: k0,
                end: k1,
            },
            &[kt],
        )?;
        let vj = b.op(
            n("v"),
            OpKind::Slice {
                axis: rank - 2,
                start: k0,
                end: k1,
            },
            &[vp],
        )?;
        let s = b.op(n("s"), mm.clone(), &[q, ktj])?;
        let mut t = b.op(n("t"), OpKind::Scale { factor: scale }, &[s])?;
        if let Some(m) = mask {
            let mj = if b.ty(m).shape[rank - 1] == 1 {
                m
            } else {
                b.op(
                    n("mask"),
                    OpKind::Slice {
                        axis: rank - 1,
                        start: k0,
                        end: k1,
                    },
                    &[m],
                )?
            };
            t = b.op(n("added"), OpKind::Add, &[t, mj])?;
        }
        if causal {
            t = b.op(n("masked"), OpKind::CausalMask { key_start: k0 }, &[t])?;
        }
        let rm = b.op(n("rowmax"), OpKind::ReduceMax { axis: rank - 1 }, &[t])?;
        let (mj, alpha) = match m {
            None => (rm, None),
            Some(mp) => {
                let mj = b.op(n("m"), OpKind::Max, &[mp, rm])?;
                let d = b.op(n("mdiff"), OpKind::Sub, &[mp, mj])?;
                (
                    mj,
                    Some(b.op(n("alpha"), OpKind::Unary(UnaryFn::Exp), &[d])?),
                )
            }
        };
        let shifted = b.op(n("shifted"), OpKind::Sub, &[t, mj])?;
        let (pa, rs) = if partials == operand {
            let p = b.op(n("p"), OpKind::Unary(UnaryFn::Exp), &[shifted])?;
            let rs = b.op(n("rowsum"), OpKind::ReduceSum { axis: rank - 1 }, &[p])?;
            (p, rs)
        } else {
            // f16 probabilities from f32 scores: the shifted scores round to f16 and `exp`
            // runs in f16 (the device's f16v4 `exp`); the row sum is the f32 sum of those
            // probabilities, the values the `p v` product multiplies.
            let sh = b.op(n("shifted16"), OpKind::cast(operand), &[shifted])?;
            let pa = b.op(n("p"), OpKind::Unary(UnaryFn::Exp), &[sh])?;
            let wide = b.op(n("pwide"), OpKind::cast(partials), &[pa])?;
            let rs = b.op(n("rowsum"), OpKind::ReduceSum { axis: rank - 1 }, &[wide])?;
            (pa, rs)
        };
        let pv = b.op(n("pv"), mm.clone(), &[pa, vj])?;
        let (lj, oj) = match (alpha, l, o) {
            (Some(alpha), Some(lp), Some(op)) => {
                let ls = b.op(n("lscaled"), OpKind::Mul, &[lp, alpha])?;
                let lj = b.op(n("l"), OpKind::Add, &[ls, rs])?;
                let os = b.op(n("oscaled"), OpKind::Mul, &[op, alpha])?;
                (lj, b.op(n("o"), OpKind::Add, &[os, pv])?)
            }
            _ => (rs, pv),
        };
        (m, l, o) = (Some(mj), Some(lj), Some(oj));
    }
    let (l, o) = (
        l.expect("at least one key block"),
        o.expect("at least one key block"),
    );
    let mut shape = q_shape;
    *shape.last_mut().expect("rank >= 2") = b.ty(o).shape[rank - 1];
    let grouped = if group > 1 { ".grouped" } else { "" };
    let result = if out == partials {
        b.op(format!("{name}{grouped}"), OpKind::Div, &[o, l])?
    } else {
        let r = b.op(format!("{name}.normalised"), OpKind::Div, &[o, l])?;
        b.op(format!("{name}{grouped}"), OpKind::cast(out), &[r])?
    };
    if group > 1 {
        b.op(name.to_string(), OpKind::Reshape { shape }, &[result])
    } else {
        Ok(result)
    }
}

/// The additive form of a flash attention's mask `m` in the partials type `partials`, of rank
/// `rank` (leading dimensions of 1 added): a float mask cast, a bool mask `0` where true and
/// the lowest finite value of `partials` where false (`(cast(m) - 1) * max`, exact), which any
/// score that is not huge plus it rounds to.
fn additive_mask(
    b: &mut GraphBuilder,
    name: &str,
    m: ValueId,
    rank: usize,
    partials: DType,
) -> Result<ValueId, GraphError> {
    let mut x = m;
    let shape = b.ty(m).shape.clone();
    if shape.len() < rank {
        let mut full = vec![1; rank - shape.len()];
        full.extend(&shape);
        x = b.op(
            format!("{name}.mask_rank"),
            OpKind::Reshape { shape: full },
            &[x],
        )?;
    }
    let dtype = b.ty(m).dtype;
    if dtype == partials {
        return Ok(x);
    }
    x = b.op(format!("{name}.mask_cast"), OpKind::cast(partials), &[x])?;
    if dtype != DType::Bool {
        return Ok(x);
    }
    let one = b.constant_values(
        format!("{name}.mask_one"),
        crate::TensorType::new(partials, vec![1; rank]),
        &[1.0],
    )?;
    let hidden = b.op(format!("{name}.mask_hidden"), OpKind::Sub, &[x, one])?;
    let largest = if partials == DType::F32 {
        f32::MAX
    } else {
        65504.0
    };
    b.op(
        format!("{name}.mask_add"),
        OpKind::Scale { factor: largest },
        &[hidden],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models;

    #[test]
    fn flash_attention_expands_into_blocks_without_a_whole_score_matrix() {
        let g = models::build(
            "attention-flash",
            &[("seq".into(), "512".into()), ("block".into(), "128".into())],
        )
        .unwrap();
        assert!(has_fused(&g));
        let e = expand_fused(&g).unwrap();
        assert!(!has_fused(&e));
        assert_eq!(e.inputs().len(), 3);
        assert_eq!(e.value(e.outputs()[0]).name, g.value(g.outputs()[0]).name);
        assert_eq!(e.value(e.outputs()[0]).ty, g.value(g.outputs()[0]).ty);
        let blocks = e
            .operations()
            .iter()
            .filter(|o| matches!(o.kind, OpKind::MatMul { .. }))
            .count();
        assert_eq!(blocks, 2 * 4, "a scores and a p v product per key block");
        // Scores are [heads, seq, block]: never [heads, seq, seq].
        for v in e.values() {
            assert!(
                v.ty.shape.iter().product::<usize>() <= 4 * 512 * 128,
                "%{} {}",
                v.name,
                v.ty
            );
        }
    }
}

#[cfg(test)]
mod mask_tests {
    use crate::{parse, print};

    #[test]
    fn causal_mask_prints_parses_and_refuses_fp8() {
        let text = "graph m {\n  input %s: f32[3, 4]\n  %m = causal_mask(%s) {key_start = 2}: f32[3, 4]\n  output %m\n}\n";
        let g = parse(text, "m.ipug").unwrap();
        assert_eq!(print(&g), text);
        let bad = "graph m {\n  input %s: f143@-4[3, 4]\n  %m = causal_mask(%s) {key_start = 0}: f143@-4[3, 4]\n  output %m\n}\n";
        let e = parse(bad, "m.ipug").unwrap_err().to_string();
        assert!(e.contains("-inf"), "{e}");
    }
}

#[cfg(test)]
mod grouped_tests {
    use super::*;
    use crate::models;

    fn build(params: &[(&str, &str)]) -> Graph {
        let params: Vec<(String, String)> = params
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        models::build("attention-flash", &params).unwrap()
    }

    #[test]
    fn grouped_query_heads_and_masks_expand_with_the_same_interface() {
        for params in [
            &[("seq", "256"), ("heads", "8"), ("kv_heads", "2")][..],
            &[("seq", "256"), ("mask", "bool")][..],
            &[
                ("seq", "256"),
                ("heads", "4"),
                ("kv_heads", "1"),
                ("mask", "f16"),
            ][..],
            &[
                ("seq", "256"),
                ("mask", "padded"),
                ("pad", "100"),
                ("causal", "true"),
            ][..],
        ] {
            let g = build(params);
            let e = expand_fused(&g).unwrap();
            assert!(!has_fused(&e), "{params:?}");
            assert_eq!(e.inputs().len(), g.inputs().len(), "{params:?}");
            let (go, eo) = (g.value(g.outputs()[0]), e.value(e.outputs()[0]));
            assert_eq!((&go.name, &go.ty), (&eo.name, &eo.ty), "{params:?}");
            // Scores stay blocked: never a whole [heads, seq, seq].
            for v in e.values() {
                assert!(
                    v.ty.elements() <= 8 * 256 * 128,
                    "{params:?}: %{} {}",
                    v.name,
                    v.ty
                );
            }
        }
    }

    #[test]
    fn kv_heads_that_do_not_divide_the_heads_are_refused_naming_k() {
        let params: Vec<(String, String)> = [("heads", "4"), ("kv_heads", "3")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let e = models::build("attention-flash", &params)
            .unwrap_err()
            .to_string();
        assert!(e.contains("does not divide") && e.contains("%k"), "{e}");
    }
}
