//! Planning of data movement (reshape, transpose, slice, concat), broadcasting binary
//! operations, reductions, softmax, layer norm and the unfused `attention` expansion.
//!
//! These operations produce values in the **row layout**: the column group is the row length
//! rounded up to 4 (`[.., 1, R, Cp]`, i.e. row-major rows padded to a multiple of 4 elements)
//! and whole rows are dealt to tiles in balanced contiguous ranges ([`row_layout`]). A row is
//! then contiguous on one tile, which is what the row kernels (`row_kernels`) walk. Operands in
//! another layout are gathered row by row into staging buffers by the exchange (`moves` does
//! the regrouping); a run of a gather is always a whole number of 4-element units, so every
//! transfer is word aligned.
//!
//! Reductions and softmax along another axis transpose that axis last, run along rows and
//! put the result back. Restrictions, refused here with the operation and the reason (never
//! at run time): a reshape or last-axis slice or concat whose runs are not whole 32-bit words
//! ([`word_grain`]: any f32 run, f16 runs of even length at even columns, FP8 runs of 4; a
//! run ending a row may end off a word, its last word reading the row's zero padding; a row
//! length of 1 is the transpose of a `[n, 1]` view); a
//! transpose whose merged view needs such runs; arithmetic on FP8 values.

use ipu_graph::{DType, OpKind, Operation, Value, ValueId};

use ipu_target::{
    BARREL_SLOT_CYCLES, EXCHANGE_BYTES_PER_CYCLE, EXCHANGE_PHASE_OVERHEAD_CYCLES, WORKER_CONTEXTS,
};

use crate::error::CodegenError;
use crate::layout::{Layout, PIECE_GRAIN};
use crate::operator_plan::*;
use crate::ops::elementwise::Elementwise;
use crate::plan::*;
use ipu_kernels::{self as kernels, BinOp, UnOp};

/// How the rows of a gathered value come from its operands.
#[derive(Debug, Clone, PartialEq)]
pub enum GatherKind {
    /// The same elements in row-major order (reshape).
    Reshape,
    /// A permutation that keeps the last axis: output row = one input row.
    Permute(Vec<usize>),
    /// `start..end` along `axis`.
    Slice {
        /// Axis.
        axis: usize,
        /// First index.
        start: usize,
        /// One past the last.
        end: usize,
    },
    /// Concatenation along `axis`.
    Concat {
        /// Axis.
        axis: usize,
    },
}

/// A row operation (the output is in the row layout).
#[derive(Debug, Clone, PartialEq)]
pub enum RowOp {
    /// Pure data movement by exchange.
    Gather(GatherKind),
    /// The input viewed as `[batch, rows, cols]` (row-major order) becomes `[batch, cols,
    /// rows]`: staged blocks transposed on tile.
    Transpose {
        /// Batch of the view.
        batch: usize,
        /// Rows of the view's input.
        rows: usize,
        /// Columns of the view's input.
        cols: usize,
    },
    /// Maximum or sum along the last axis (kept with size 1).
    Reduce {
        /// Maximum (else sum).
        max: bool,
    },
    /// Elementwise binary operation broadcasting size-1 dimensions.
    Broadcast(BinOp),
    /// Softmax along the last axis; `causal` masks column `j > i` in row `i` of each matrix.
    Softmax {
        /// Causal mask.
        causal: bool,
    },
    /// Layer norm along the last axis.
    LayerNorm {
        /// Added to the variance.
        epsilon: f32,
    },
}

impl RowOp {
    /// What the step does, for messages.
    pub fn step_name(&self) -> &'static str {
        match self {
            RowOp::Gather(_) => "gather",
            RowOp::Transpose { .. } => "transpose",
            RowOp::Reduce { max: true } => "row maximum",
            RowOp::Reduce { max: false } => "row sum",
            RowOp::Broadcast(_) => "broadcasting elementwise",
            RowOp::Softmax { .. } => "softmax",
            RowOp::LayerNorm { .. } => "layer norm",
        }
    }
}

/// The row length of `shape` rounded up to 4: the row layout's column group.
pub fn row_group(shape: &[usize]) -> usize {
    shape.last().copied().unwrap_or(1).div_ceil(PIECE_GRAIN) * PIECE_GRAIN
}

/// Elements of `dtype` per 32-bit word (1 for f32, 2 for f16, 4 for FP8): a gather's runs
/// start, and end unless they end a row, at multiples of this many elements, so that every
/// exchange moves whole words.
pub fn word_grain(dtype: DType) -> usize {
    (4 / dtype.bytes()).max(1)
}

/// Rows of `shape` (every dimension but the last).
pub fn row_count(shape: &[usize]) -> usize {
    shape[..shape.len().saturating_sub(1)].iter().product()
}

/// The row layout of `shape` over `tiles` tiles: units of `unit_rows` whole rows dealt in
/// balanced contiguous ranges, one piece per tile.
pub fn row_layout(shape: &[usize], tiles: u32, unit_rows: usize) -> Layout {
    let cp = row_group(shape);
    let rows = row_count(shape);
    let unit_rows = unit_rows.max(1);
    let units = rows / unit_rows;
    let t = (tiles as usize).clamp(1, units.max(1));
    let ranges = (0..t).map(|i| {
        let (u0, u1) = (units * i / t, units * (i + 1) / t);
        (i as u32, u0 * unit_rows * cp, u1 * unit_rows * cp)
    });
    Layout::from_ranges(cp, ranges.collect::<Vec<_>>())
}

/// Rows `r0..r1` of each tile when `rows` rows are dealt in balanced contiguous ranges over
/// `tiles` tiles (the split of [`row_layout`] with units of one row).
pub fn tile_rows(rows: usize, tiles: u32) -> Vec<(u32, usize, usize)> {
    let t = (tiles as usize).clamp(1, rows.max(1));
    (0..t)
        .map(|i| (i as u32, rows * i / t, rows * (i + 1) / t))
        .filter(|r| r.2 > r.1)
        .collect()
}

/// The **grouped row layout** of `shape` in column group `group`: rows dealt as in
/// [`tile_rows`], and on each tile the rows of column group 0, then of group 1, and so on
/// (tile-local order `[group][row][group columns]`). With `group` = [`row_group`] it is
/// [`row_layout`]; with the AMP's K block a matmul reads it without regrouping.
pub fn grouped_layout(shape: &[usize], tiles: u32, group: usize) -> Layout {
    let (_, r, c) = ipu_package::split_shape(shape);
    let groups = c.div_ceil(group);
    let per_outer = groups * r * group;
    let mut ranges = Vec::new();
    for (tile, a, b) in tile_rows(row_count(shape), tiles) {
        for j in 0..groups {
            let mut row = a;
            while row < b {
                let o = row / r;
                let e = b.min((o + 1) * r);
                let s = o * per_outer + j * r * group + (row - o * r) * group;
                ranges.push((tile, s, s + (e - row) * group));
                row = e;
            }
        }
    }
    Layout::from_ranges(group, ranges)
}

/// The column group a row operation writes its result in: the default group of the type
/// when rows are longer (a matmul consumer then reads whole blocks), else the row length.
pub fn output_group(shape: &[usize], dtype: DType) -> usize {
    let g = default_group(dtype);
    if row_group(shape) > g {
        g
    } else {
        row_group(shape)
    }
}

/// `perm` without the size-1 dimensions of `shape`: the shape kept and the renumbered
/// permutation.
fn drop_unit_dims(shape: &[usize], perm: &[usize]) -> (Vec<usize>, Vec<usize>) {
    let keep: Vec<usize> = (0..shape.len()).filter(|&d| shape[d] != 1).collect();
    let new_index = |d: usize| keep.iter().position(|&k| k == d);
    let s = keep.iter().map(|&d| shape[d]).collect();
    let p = perm.iter().filter_map(|&d| new_index(d)).collect();
    (s, p)
}

/// Merges input dimensions that stay adjacent and in order in the output: the merged input
/// shape and the merged permutation.
fn merge_dims(shape: &[usize], perm: &[usize]) -> (Vec<usize>, Vec<usize>) {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for &p in perm {
        match groups.last_mut() {
            Some(g) if g.last().is_some_and(|&l| l + 1 == p) => g.push(p),
            _ => groups.push(vec![p]),
        }
    }
    let mut order: Vec<usize> = (0..groups.len()).collect();
    order.sort_by_key(|&i| groups[i][0]);
    let merged = order
        .iter()
        .map(|&i| groups[i].iter().map(|&d| shape[d]).product())
        .collect();
    let mut pos = vec![0; groups.len()];
    for (k, &i) in order.iter().enumerate() {
        pos[i] = k;
    }
    (merged, (0..groups.len()).map(|j| pos[j]).collect())
}

impl Planner<'_> {
    fn refuse<T>(&self, op: &str, what: &str, why: String) -> Result<T, CodegenError> {
        Err(CodegenError::unsupported(
            format!("%{op}"),
            format!("{what}: {why}"),
        ))
    }

    /// A new value in the row layout.
    fn row_value(
        &mut self,
        name: String,
        dtype: DType,
        shape: Vec<usize>,
        graph: Option<ValueId>,
        unit_rows: usize,
    ) -> DevValueId {
        let layout = row_layout(&shape, self.tiles, unit_rows);
        self.add_value(name, dtype, shape, graph, layout)
    }

    /// Records a row operation with its estimate, after checking its tile memory: the output
    /// piece and every operand's rows staged next to it.
    fn push_rows(
        &mut self,
        name: String,
        kind: RowOp,
        inputs: Vec<DevValueId>,
        output: DevValueId,
    ) -> Result<(), CodegenError> {
        let out = &self.values[output];
        let eb = out.dtype.bytes() as u64;
        let most = out.layout.most_elements_on_a_tile() as u64;
        let active = out.layout.tiles().len().max(1) as u64;
        // Per tile, live together: each operand's own piece, its staged rows (twice when a
        // column-grouped operand is regrouped on tile), the output piece and, for an output in
        // several column groups, its row-major scratch.
        let tiles = self.tiles;
        let staged: u64 = inputs
            .iter()
            .map(|&i| {
                let v = &self.values[i];
                let veb = v.dtype.bytes() as u64;
                let own = v.layout.most_elements_on_a_tile() as u64 * veb;
                let total = ipu_package::storage_elements(&v.shape, row_group(&v.shape)) as u64;
                let rows = total.div_ceil(active) * veb;
                let in_rows = v.layout == row_layout(&v.shape, tiles, 1);
                let regrouped = v.layout.group < row_group(&v.shape);
                own + match kind {
                    RowOp::Gather(_) => 0,
                    _ if in_rows => 0,
                    _ if regrouped => 2 * rows,
                    _ => rows,
                }
            })
            .sum();
        let scratch = if out.layout.group < row_group(&out.shape) {
            most * eb
        } else {
            0
        };
        let bytes = most * eb + scratch + staged;
        // The tile holding the most output rows is the busiest (operands' rows are staged
        // evenly over the active tiles).
        let busiest = out
            .layout
            .elements_per_tile()
            .into_iter()
            .max_by_key(|&(t, e)| (e, std::cmp::Reverse(t)))
            .map(|(t, _)| t);
        let other_live = self.other_live_bytes();
        let avail = (self.target.memory_bytes() as u64 - SUPPORT_RESERVE_BYTES)
            .saturating_sub(other_live)
            .min(self.budget().unwrap_or(u64::MAX));
        self.fits_any(busiest, bytes, avail, || {
            format!(
                "the busiest tile's output rows and staged operands of a {} step, with \
                 {SUPPORT_RESERVE_BYTES} bytes reserved per tile and {other_live} held by \
                 other live values",
                kind.step_name()
            )
        })?;
        let slot = BARREL_SLOT_CYCLES as u64;
        // The busiest tile's rows over six workers, costed with the kernels' slot models;
        // moving operands costs a word per cycle on the receiving port.
        let compute = slot * self.row_slots(&kind, &inputs, output);
        let exchange =
            staged / EXCHANGE_BYTES_PER_CYCLE as u64 + EXCHANGE_PHASE_OVERHEAD_CYCLES as u64;
        let finalist = Finalist {
            op: name,
            mapping: format!("rows tiles={active}"),
            estimated_cycles: compute + exchange,
            estimated_exchange_cycles: exchange,
            peak_tile_bytes: bytes,
            tiles: active as u32,
            alternatives: 1,
        };
        self.push_unchosen(finalist, DevOpKind::new(kind), inputs, output);
        Ok(())
    }

    /// Issue slots of the busiest worker of a row operation (from the `row_kernels` models).
    fn row_slots(&self, kind: &RowOp, inputs: &[DevValueId], output: DevValueId) -> u64 {
        use ipu_kernels::rows as rk;
        let out = &self.values[output];
        let x = &self.values[inputs[0]];
        let eb = x.dtype.bytes() as u32;
        let rows_t = tile_rows(row_count(&out.shape), self.tiles)
            .iter()
            .map(|r| r.2 - r.1)
            .max()
            .unwrap_or(0) as u32;
        let per_worker = rows_t.div_ceil(WORKER_CONTEXTS);
        let c = *x.shape.last().unwrap_or(&1) as u32;
        let co = *out.shape.last().unwrap_or(&1) as u32;
        let stride_words = row_group(&out.shape) as u32 * eb / 4;
        let gx = x.layout.group as u32;
        let regroup = if c > gx {
            let words = gx * eb / 8;
            rk::copy2d_slots(per_worker, c.div_ceil(gx), words.max(1))
        } else {
            0
        };
        let ty = elem(x.dtype).unwrap_or(kernels::Elem::F16);
        let slots = match kind {
            RowOp::Gather(_) => 0,
            RowOp::Transpose { rows, .. } => {
                let unit = (*rows as u32 / co).max(1);
                let words = (*rows as u32).div_ceil(4) * 4 * eb / 4;
                rk::transpose_slots(eb, (rows_t / unit).div_ceil(6), words)
            }
            RowOp::Reduce { .. } => regroup + rk::row_reduce_slots(ty, per_worker, c),
            RowOp::Softmax { .. } | RowOp::LayerNorm { .. } => {
                let softmax = matches!(kind, RowOp::Softmax { .. });
                let fused = |rows| {
                    if softmax {
                        rk::softmax_slots(ty, false, rows, c, c, 0, stride_words)
                    } else {
                        rk::layer_norm_slots(ty, false, rows, c, stride_words)
                    }
                };
                if rows_t < 6 && rows_t > 0 {
                    // Statistics one row per worker, then the last pass shared by the workers.
                    let last_pass = rk::row_apply_slots(ty, softmax, c / 2, c % 2, stride_words);
                    let chunks = 6 / rows_t;
                    regroup
                        + fused(1).saturating_sub(last_pass)
                        + rk::row_apply_slots(ty, softmax, (c / 2).div_ceil(chunks), 0, 0)
                } else {
                    regroup + fused(per_worker)
                }
            }
            RowOp::Broadcast(op) => {
                let scalar = inputs
                    .iter()
                    .any(|&i| self.values[i].shape.last() == Some(&1) && co > 1);
                if scalar {
                    let reversed = self.values[inputs[0]].shape.last() == Some(&1);
                    rk::row_scalar_slots(ty, *op, reversed, per_worker, co, stride_words)
                } else {
                    kernels::binary_slots(ty, *op, (per_worker * stride_words * 4).div_ceil(8))
                }
            }
        };
        slots as u64 + 40
    }

    /// Plans the row operations of `op` (see the module docs).
    pub(crate) fn plan_rows(
        &mut self,
        op: &Operation,
        ins: &[DevValueId],
        out_val: &Value,
    ) -> Result<(), CodegenError> {
        let out = op.outputs[0];
        let what = op.kind.mnemonic();
        let oshape = out_val.ty.shape.clone();
        let odtype = out_val.ty.dtype;
        let name = out_val.name.clone();
        let x = ins[0];
        let xshape = self.values[x].shape.clone();
        let rank = xshape.len();
        let arith = |p: &Self, v: DevValueId| -> Result<kernels::Elem, CodegenError> {
            elem(p.values[v].dtype).ok_or_else(|| {
                CodegenError::unsupported(
                    format!("%{}", op.name),
                    format!("{what}: arithmetic on FP8 is not lowered; cast to f16 first"),
                )
            })
        };
        match &op.kind {
            OpKind::Reshape { .. } => {
                self.plan_reorder(&op.name, what, x, oshape, name, Some(out))?;
                Ok(())
            }
            OpKind::Transpose { perm } => {
                self.plan_transpose(&op.name, x, perm, Some((name, out)))?;
                Ok(())
            }
            OpKind::Slice { axis, start, end } => {
                let c = xshape[rank - 1];
                let g = word_grain(odtype);
                if *axis == rank - 1
                    && (!start.is_multiple_of(g) || (!(end - start).is_multiple_of(g) && *end != c))
                {
                    return self.refuse(
                        &op.name,
                        what,
                        format!(
                            "a slice {start}..{end} of the last axis of {odtype} elements must start at a multiple of {g} and have a multiple of {g} elements or end at the row's end ({c}): the runs to move are not whole 32-bit words"
                        ),
                    );
                }
                let r = self.row_value(name, odtype, oshape, Some(out), 1);
                let kind = GatherKind::Slice {
                    axis: *axis,
                    start: *start,
                    end: *end,
                };
                self.push_rows(op.name.clone(), RowOp::Gather(kind), vec![x], r)
            }
            OpKind::Concat { axis } => {
                if *axis == rank - 1 {
                    let g = word_grain(odtype);
                    for &i in &ins[..ins.len() - 1] {
                        let c = self.values[i].shape[rank - 1];
                        if !c.is_multiple_of(g) {
                            return self.refuse(
                                &op.name,
                                what,
                                format!(
                                    "operand %{} has {c} columns of {odtype}, not a multiple of {g}: along the last axis only the last operand may end off a word",
                                    self.values[i].name
                                ),
                            );
                        }
                    }
                }
                let r = self.row_value(name, odtype, oshape, Some(out), 1);
                self.push_rows(
                    op.name.clone(),
                    RowOp::Gather(GatherKind::Concat { axis: *axis }),
                    ins.to_vec(),
                    r,
                )
            }
            OpKind::ReduceMax { axis } | OpKind::ReduceSum { axis } => {
                arith(self, x)?;
                let max = matches!(op.kind, OpKind::ReduceMax { .. });
                if *axis != rank - 1 {
                    return self.plan_axis_moved(op, x, *axis, RowOp::Reduce { max }, out_val);
                }
                let r = self.row_value(name, odtype, oshape, Some(out), 1);
                self.push_rows(op.name.clone(), RowOp::Reduce { max }, vec![x], r)
            }
            OpKind::Softmax { axis } => {
                arith(self, x)?;
                if *axis != rank - 1 {
                    let kind = RowOp::Softmax { causal: false };
                    return self.plan_axis_moved(op, x, *axis, kind, out_val);
                }
                let layout = grouped_layout(&oshape, self.tiles, output_group(&oshape, odtype));
                let r = self.add_value(name, odtype, oshape, Some(out), layout);
                self.push_rows(
                    op.name.clone(),
                    RowOp::Softmax { causal: false },
                    vec![x],
                    r,
                )
            }
            OpKind::LayerNorm { epsilon } => {
                arith(self, x)?;
                let r = self.row_value(name, odtype, oshape, Some(out), 1);
                self.push_rows(
                    op.name.clone(),
                    RowOp::LayerNorm { epsilon: *epsilon },
                    vec![x],
                    r,
                )
            }
            OpKind::Attention {
                scale,
                causal,
                partials,
                out: out_dtype,
            } => self.plan_attention(op, ins, *scale, *causal, *partials, *out_dtype, out_val),
            _ => self.refuse(&op.name, what, "not a row operation".into()),
        }
    }

    /// Plans an elementwise binary operation whose operands broadcast size-1 dimensions.
    pub(crate) fn plan_broadcast(
        &mut self,
        op: &Operation,
        bop: BinOp,
        ins: &[DevValueId],
        out_val: &Value,
    ) -> Result<(), CodegenError> {
        let oshape = &out_val.ty.shape;
        for &i in ins {
            let s = &self.values[i].shape;
            if s.len() != oshape.len() || s.iter().zip(oshape).any(|(&d, &o)| d != o && d != 1) {
                return self.refuse(
                    &op.name,
                    op.kind.mnemonic(),
                    format!(
                        "operand %{} of shape {:?} does not broadcast to {:?}",
                        self.values[i].name, s, oshape
                    ),
                );
            }
        }
        let r = self.row_value(
            out_val.name.clone(),
            out_val.ty.dtype,
            oshape.clone(),
            Some(op.outputs[0]),
            1,
        );
        self.push_rows(op.name.clone(), RowOp::Broadcast(bop), ins.to_vec(), r)
    }

    /// Plans `x` transposed by `perm`; the result is named `final_value` if given, else
    /// `{op}.t`. Returns the result.
    fn plan_transpose(
        &mut self,
        op: &str,
        x: DevValueId,
        perm: &[usize],
        final_value: Option<(String, ValueId)>,
    ) -> Result<DevValueId, CodegenError> {
        let xshape = self.values[x].shape.clone();
        let dtype = self.values[x].dtype;
        let n = xshape.len();
        let oshape: Vec<usize> = perm.iter().map(|&p| xshape[p]).collect();
        let (name, graph) = match &final_value {
            Some((nm, g)) => (nm.clone(), Some(*g)),
            None => (format!("{op}.t"), None),
        };
        if n == 0 || perm[n - 1] == n - 1 {
            let r = self.row_value(name, dtype, oshape, graph, 1);
            self.push_rows(
                op.to_string(),
                RowOp::Gather(GatherKind::Permute(perm.to_vec())),
                vec![x],
                r,
            )?;
            return Ok(r);
        }
        let (s1, p1) = drop_unit_dims(&xshape, perm);
        let (ms, mp) = merge_dims(&s1, &p1);
        let k = mp.len();
        if k <= 1 {
            // Only the order of size-1 dimensions changes: the elements keep their order.
            return self.plan_reorder(op, "transpose", x, oshape, name, graph);
        }
        let swap_last = (0..k - 2).all(|i| mp[i] == i) && mp[k - 2] == k - 1 && mp[k - 1] == k - 2;
        let (ci, co) = (xshape[n - 1], oshape[n - 1]);
        let batch: usize = ms[..k - 2].iter().product();
        let (rows, cols) = (ms[k - 2], ms[k - 1]);
        let aligned = (cols == ci || ci.is_multiple_of(PIECE_GRAIN))
            && (rows == co || co.is_multiple_of(PIECE_GRAIN));
        let pure_swap = (0..n - 2).all(|i| perm[i] == i) && perm[n - 2] == n - 1;
        if swap_last && (aligned || pure_swap) {
            if !aligned {
                return self.refuse(
                    op,
                    "transpose",
                    format!(
                        "the transposed view [{batch}, {rows}, {cols}] spans rows of {ci} (input) or {co} (output) elements, which must then be multiples of {PIECE_GRAIN}"
                    ),
                );
            }
            let unit = rows / co;
            let r = self.row_value(name, dtype, oshape, graph, unit);
            self.push_rows(
                op.to_string(),
                RowOp::Transpose { batch, rows, cols },
                vec![x],
                r,
            )?;
            return Ok(r);
        }
        // Decompose: a row permutation bringing the new last axis just before the old one, a
        // swap of the last two axes, then a row permutation into the final order.
        let p = perm[n - 1];
        let l = n - 1;
        let rest: Vec<usize> = perm[..n - 1].iter().copied().filter(|&d| d != l).collect();
        let mut perm1 = rest.clone();
        perm1.extend([p, l]);
        let x1 = self.plan_transpose(&format!("{op}.gather"), x, &perm1, None)?;
        let mut swap: Vec<usize> = (0..n).collect();
        swap.swap(n - 2, n - 1);
        // Dims of x2 (as input dims of x): rest ++ [l, p].
        let mut x2_dims = rest;
        x2_dims.extend([l, p]);
        let perm3: Vec<usize> = perm
            .iter()
            .map(|d| x2_dims.iter().position(|e| e == d).expect("a permutation"))
            .collect();
        let identity = perm3.iter().enumerate().all(|(i, &d)| i == d);
        if identity {
            self.plan_transpose(&format!("{op}.swap"), x1, &swap, final_value)
        } else {
            let x2 = self.plan_transpose(&format!("{op}.swap"), x1, &swap, None)?;
            self.plan_transpose(op, x2, &perm3, final_value)
        }
    }

    /// Plans `x` in a new shape with the same elements in the same row-major order (reshape):
    /// a gather of runs when both row lengths are multiples of 4 (or equal); when one of them
    /// is 1, the transpose of a `[n, 1]` view (one element per staged row); else a gather of
    /// runs when both are multiples of the [`word_grain`]; else refused.
    fn plan_reorder(
        &mut self,
        op: &str,
        what: &str,
        x: DevValueId,
        oshape: Vec<usize>,
        name: String,
        graph: Option<ValueId>,
    ) -> Result<DevValueId, CodegenError> {
        let dtype = self.values[x].dtype;
        let xshape = &self.values[x].shape;
        let (ci, co) = (*xshape.last().unwrap_or(&1), *oshape.last().unwrap_or(&1));
        let total: usize = oshape.iter().product();
        let aligned =
            ci == co || (ci.is_multiple_of(PIECE_GRAIN) && co.is_multiple_of(PIECE_GRAIN));
        let kind = if aligned {
            RowOp::Gather(GatherKind::Reshape)
        } else if ci == 1 {
            // Input rows of one element: view [total / co, co, 1] -> [total / co, 1, co].
            RowOp::Transpose {
                batch: total / co,
                rows: co,
                cols: 1,
            }
        } else if co == 1 {
            // Output rows of one element: view [total / ci, 1, ci] -> [total / ci, ci, 1].
            RowOp::Transpose {
                batch: total / ci,
                rows: 1,
                cols: ci,
            }
        } else if ci.is_multiple_of(word_grain(dtype)) && co.is_multiple_of(word_grain(dtype)) {
            // Runs of whole words that are not whole 4-element units (f32, or f16 pairs).
            RowOp::Gather(GatherKind::Reshape)
        } else {
            let g = word_grain(dtype);
            return self.refuse(
                op,
                what,
                format!(
                    "the last dimension changes from {ci} to {co} and one of them is not a multiple of {g} ({dtype} elements per 32-bit word): the runs to move are not whole 32-bit words"
                ),
            );
        };
        let r = self.row_value(name, dtype, oshape, graph, 1);
        self.push_rows(op.to_string(), kind, vec![x], r)?;
        Ok(r)
    }

    /// Plans a reduction or softmax along a non-last `axis` of `x`: the axis is transposed
    /// last, the row operation runs, and the result is put back in the output's order.
    fn plan_axis_moved(
        &mut self,
        op: &Operation,
        x: DevValueId,
        axis: usize,
        kind: RowOp,
        out_val: &Value,
    ) -> Result<(), CodegenError> {
        let xshape = self.values[x].shape.clone();
        let n = xshape.len();
        let mut perm: Vec<usize> = (0..n).filter(|&d| d != axis).collect();
        perm.push(axis);
        let x1 = self.plan_transpose(&format!("{}.axis_last", op.name), x, &perm, None)?;
        let mut s1 = self.values[x1].shape.clone();
        if matches!(kind, RowOp::Reduce { .. }) {
            s1[n - 1] = 1;
        }
        let odtype = out_val.ty.dtype;
        let layout = grouped_layout(&s1, self.tiles, output_group(&s1, odtype));
        let r = self.add_value(format!("{}.rows", op.name), odtype, s1, None, layout);
        self.push_rows(op.name.clone(), kind.clone(), vec![x1], r)?;
        let (name, graph) = (out_val.name.clone(), Some(op.outputs[0]));
        let back = format!("{}.back", op.name);
        if matches!(kind, RowOp::Reduce { .. }) {
            self.plan_reorder(&back, "reduce", r, out_val.ty.shape.clone(), name, graph)?;
        } else {
            let mut inverse = vec![0; n];
            for (i, &p) in perm.iter().enumerate() {
                inverse[p] = i;
            }
            self.plan_transpose(&back, r, &inverse, Some((name, op.outputs[0])))?;
        }
        Ok(())
    }

    /// Expands `attention` exactly as the reference's device precision defines it: `S = q
    /// k^T` (matmul rule, rounded to partials), `T = partials(S * scale)`, `P =
    /// partials(softmax(T))` with the causal mask applied inside the softmax (masked entries are
    /// `-inf`, i.e. left out of the maximum and sum and written as 0), `out = out(P v)`.
    #[allow(clippy::too_many_arguments)]
    fn plan_attention(
        &mut self,
        op: &Operation,
        ins: &[DevValueId],
        scale: f32,
        causal: bool,
        partials: DType,
        out_dtype: DType,
        out_val: &Value,
    ) -> Result<(), CodegenError> {
        let name = &op.name;
        let (mut q, mut k, mut v) = (ins[0], ins[1], ins[2]);
        let in_dtype = self.values[q].dtype;
        if in_dtype.is_fp8() {
            q = self.cast_to(q, DType::F16, &format!("{name}.q_f16"));
            k = self.cast_to(k, DType::F16, &format!("{name}.k_f16"));
            v = self.cast_to(v, DType::F16, &format!("{name}.v_f16"));
        }
        let op_dtype = self.values[q].dtype;
        // The AMP mode of a product of `operands` in the partials type, or the refusal `why`.
        let amp_mode = |this: &Self, operands: DType, why: String| {
            let mode = matmul_mode(operands, partials);
            mode.map_or_else(|| this.refuse(name, "attention", why), Ok)
        };
        let (partials_name, in_name) = (dtype_name(partials), dtype_name(in_dtype));
        let why = format!("partials {partials_name} with {in_name} operands have no AMP mode");
        let mode = amp_mode(self, op_dtype, why)?;
        let qs = self.values[q].shape.clone();
        let ks = self.values[k].shape.clone();
        let r = qs.len();
        // The expansion holds the whole score matrix, twice at least (scores and scaled
        // scores are both live during the scale): refuse what cannot fit on the tiles at all.
        let batch: usize = qs[..r - 2].iter().product();
        let (sq, sk) = (qs[r - 2], ks[r - 2]);
        let score_bytes = (batch * sq * sk * partials.bytes()) as u64;
        let per_tile = (2 * score_bytes).div_ceil(self.tiles as u64);
        let avail = self.target.memory_bytes() as u64 - SUPPORT_RESERVE_BYTES;
        let tiles = self.tiles;
        // Spread evenly: every tile needs `per_tile`.
        self.fits_any(None, per_tile, avail, || {
            format!(
                "unfused attention holds the [{batch}, {sq}, {sk}] {} score matrix twice \
                 (scores and scaled scores) over {tiles} tiles, with {SUPPORT_RESERVE_BYTES} \
                 bytes reserved per tile (flash_attention keeps no whole score matrix)",
                dtype_name(partials),
            )
        })?;
        let mut perm: Vec<usize> = (0..r).collect();
        perm.swap(r - 2, r - 1);
        let kt = self.plan_transpose(&format!("{name}.k_t"), k, &perm, None)?;
        let mut sshape = qs.clone();
        sshape[r - 1] = ks[r - 2];
        let s = self.plan_matmul(
            &format!("{name}.scores"),
            mode,
            q,
            kt,
            partials,
            &sshape,
            false,
        )?;
        let layout = self.values[s].layout.clone();
        let t = self.add_value(
            format!("{name}.scaled"),
            partials,
            sshape.clone(),
            None,
            layout,
        );
        self.push_simple(
            format!("{name}.scale"),
            Elementwise::Unary(UnOp::Scale, scale),
            vec![s],
            t,
        );
        let layout = grouped_layout(&sshape, self.tiles, output_group(&sshape, partials));
        let p = self.add_value(format!("{name}.probs"), partials, sshape, None, layout);
        self.push_rows(
            format!("{name}.softmax"),
            RowOp::Softmax { causal },
            vec![t],
            p,
        )?;
        // P is in the partials type: the second product takes its operands in that type.
        let v2 = self.cast_to(v, partials, &format!("{name}.v_{}", dtype_name(partials)));
        let why = format!("no AMP mode for {partials_name} probabilities");
        let mode2 = amp_mode(self, partials, why)?;
        let oshape = out_val.ty.shape.clone();
        let o = self.plan_matmul(
            &format!("{name}.context"),
            mode2,
            p,
            v2,
            partials,
            &oshape,
            false,
        )?;
        let out = op.outputs[0];
        if partials == out_dtype {
            self.rename(o, out_val.name.clone(), out);
        } else {
            let layout = self.values[o].layout.clone();
            let rv = self.add_value(out_val.name.clone(), out_dtype, oshape, Some(out), layout);
            self.push_simple(format!("{name}.cast"), Elementwise::Cast, vec![o], rv);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merging_finds_the_swapped_view() {
        // [s, h, d] -> [h, d, s]: the view [s, h*d] -> [h*d, s].
        assert_eq!(
            merge_dims(&[8, 4, 16], &[1, 2, 0]),
            (vec![8, 64], vec![1, 0])
        );
        // [h, s, d] -> [h, d, s]: batched swap.
        assert_eq!(
            merge_dims(&[4, 8, 16], &[0, 2, 1]),
            (vec![4, 8, 16], vec![0, 2, 1])
        );
        assert_eq!(
            drop_unit_dims(&[1, 5, 3], &[1, 0, 2]),
            (vec![5, 3], vec![0, 1])
        );
    }

    #[test]
    fn row_layout_keeps_rows_whole() {
        let l = row_layout(&[3, 7, 21], 5, 1);
        assert_eq!(l.group, 24);
        l.check(3 * 7 * 24).unwrap();
        assert!(
            l.pieces
                .iter()
                .all(|p| p.start % 24 == 0 && p.end % 24 == 0)
        );
    }
}
