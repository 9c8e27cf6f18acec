//! Lowering of row operations (`plan::rows`): gathers of whole 4-element runs by exchange,
//! on-tile transposes of staged blocks, and row kernels over operands staged in the row
//! layout.

use ipu_package::split_shape;

use super::plan::{GatherKind, RowOp, row_count, row_group, row_layout, tile_rows, word_grain};
use crate::error::CodegenError;
use crate::layout::PIECE_GRAIN;
use crate::lower::*;
use crate::operator_plan::{DevOp, DevValue, DevValueId, FamilyOp};
use crate::plan::elem;
use crate::program::*;
use ipu_kernels::rows as row_kernels;
use ipu_kernels::state::*;
use ipu_kernels::{self as kernels, BinOp, Kernel, OVERREAD_BYTES};

/// The storage ranges holding columns `c0..c1` of flattened row `row` of a value of `shape`
/// stored in column group `group`; `c0` is a multiple of 4 and `c1` is rounded up to one (the
/// columns past the row's end are the value's zero padding). Split at group boundaries.
fn segment(shape: &[usize], group: usize, row: usize, c0: usize, c1: usize) -> Vec<(usize, usize)> {
    debug_assert_eq!(c0 % 4, 0);
    segment_exact(shape, group, row, c0, c1.div_ceil(4) * 4)
}

/// The storage ranges holding exactly columns `c0..c1` of flattened row `row` (no rounding:
/// the gather of runs that are whole words but not whole 4-element units). Split at group
/// boundaries.
fn segment_exact(
    shape: &[usize],
    group: usize,
    row: usize,
    c0: usize,
    c1: usize,
) -> Vec<(usize, usize)> {
    let (_, rows, cols) = split_shape(shape);
    let per_outer = cols.div_ceil(group) * rows * group;
    let (o, r) = (row / rows, row % rows);
    debug_assert!(c1 <= cols.div_ceil(group) * group);
    let mut out = Vec::new();
    let mut c = c0;
    while c < c1 {
        let g = c / group;
        let e = c1.min((g + 1) * group);
        let s = o * per_outer + g * rows * group + r * group + c % group;
        out.push((s, s + e - c));
        c = e;
    }
    out
}

/// Row-major multi-index of `i` in `dims`.
fn unflatten(mut i: usize, dims: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; dims.len()];
    for d in (0..dims.len()).rev() {
        idx[d] = i % dims[d];
        i /= dims[d];
    }
    idx
}

/// Row-major linear index of `idx` in `dims`.
fn flatten(idx: &[usize], dims: &[usize]) -> usize {
    idx.iter().zip(dims).fold(0, |acc, (&i, &d)| acc * d + i)
}

/// One run of an output row: columns `c0..c1` of row `row` of operand `input`, placed at
/// column `dst` of the output row.
struct Source {
    input: usize,
    row: usize,
    c0: usize,
    c1: usize,
    dst: usize,
}

/// Splits the row-major element range `f0..f1` of a value with rows of `c` elements into runs.
fn flat_runs(f0: usize, f1: usize, c: usize, input: usize, dst0: usize) -> Vec<Source> {
    let mut out = Vec::new();
    let mut f = f0;
    while f < f1 {
        let (row, col) = (f / c, f % c);
        let n = (f1 - f).min(c - col);
        out.push(Source {
            input,
            row,
            c0: col,
            c1: col + n,
            dst: dst0 + f - f0,
        });
        f += n;
    }
    out
}

/// The runs making output row `r` of a gather.
fn sources(kind: &GatherKind, ins: &[&[usize]], out: &[usize], r: usize) -> Vec<Source> {
    let n = out.len();
    let co = out[n - 1];
    let lead = &out[..n - 1];
    match kind {
        GatherKind::Reshape => {
            let ci = *ins[0].last().expect("rank >= 1");
            if ci == co {
                vec![Source {
                    input: 0,
                    row: r,
                    c0: 0,
                    c1: co,
                    dst: 0,
                }]
            } else {
                flat_runs(r * co, (r + 1) * co, ci, 0, 0)
            }
        }
        GatherKind::Permute(perm) => {
            let oi = unflatten(r, lead);
            let mut ii = vec![0; n - 1];
            for k in 0..n - 1 {
                ii[perm[k]] = oi[k];
            }
            vec![Source {
                input: 0,
                row: flatten(&ii, &ins[0][..n - 1]),
                c0: 0,
                c1: co,
                dst: 0,
            }]
        }
        GatherKind::Slice { axis, start, end } => {
            if *axis == n - 1 {
                vec![Source {
                    input: 0,
                    row: r,
                    c0: *start,
                    c1: *end,
                    dst: 0,
                }]
            } else {
                let mut oi = unflatten(r, lead);
                oi[*axis] += start;
                vec![Source {
                    input: 0,
                    row: flatten(&oi, &ins[0][..n - 1]),
                    c0: 0,
                    c1: co,
                    dst: 0,
                }]
            }
        }
        GatherKind::Concat { axis } => {
            if *axis == n - 1 {
                let mut off = 0;
                ins.iter()
                    .enumerate()
                    .map(|(i, s)| {
                        let ci = s[n - 1];
                        let src = Source {
                            input: i,
                            row: r,
                            c0: 0,
                            c1: ci,
                            dst: off,
                        };
                        off += ci;
                        src
                    })
                    .collect()
            } else {
                let mut oi = unflatten(r, lead);
                let mut at = oi[*axis];
                for (i, s) in ins.iter().enumerate() {
                    if at < s[*axis] {
                        oi[*axis] = at;
                        return vec![Source {
                            input: i,
                            row: flatten(&oi, &s[..n - 1]),
                            c0: 0,
                            c1: co,
                            dst: 0,
                        }];
                    }
                    at -= s[*axis];
                }
                unreachable!("a verified concat covers its output")
            }
        }
    }
}

/// Rows of a tile's piece of a row-layout value: `(tile, first row, end row, local element)`.
fn piece_rows(layout: &crate::layout::Layout) -> Vec<(u32, usize, usize, usize)> {
    let g = layout.group;
    layout
        .pieces
        .iter()
        .map(|p| (p.tile, p.start / g, p.end.div_ceil(g), p.local))
        .collect()
}

impl<'a> Lowerer<'a> {
    /// Lowers the row operation `index`.
    pub(crate) fn lower_rows(
        &mut self,
        index: usize,
        rop: &RowOp,
        steps: &mut OpSteps,
    ) -> Result<(), CodegenError> {
        match rop {
            RowOp::Gather(kind) => self.lower_gather(index, kind, steps),
            RowOp::Transpose { batch, rows, cols } => {
                self.lower_transpose(index, *batch, *rows, *cols, steps)
            }
            RowOp::Reduce { .. } | RowOp::Softmax { .. } | RowOp::LayerNorm { .. } => {
                self.lower_row_kernel(index, rop, steps)
            }
            RowOp::Broadcast(bop) => self.lower_broadcast(index, *bop, steps),
        }
    }

    /// Row operation `index`, its first operand and its result.
    fn operand_and_result(&self, index: usize) -> (&'a DevOp, &'a DevValue, &'a DevValue) {
        let plan = self.plan;
        let op = &plan.ops[index];
        (op, &plan.values[op.inputs[0]], &plan.values[op.output])
    }

    fn lower_gather(
        &mut self,
        index: usize,
        kind: &GatherKind,
        steps: &mut OpSteps,
    ) -> Result<(), CodegenError> {
        let plan = self.plan;
        let op = &plan.ops[index];
        let out = &plan.values[op.output];
        let eb = out.dtype.bytes();
        let cp = out.layout.group;
        let in_shapes: Vec<&[usize]> = op
            .inputs
            .iter()
            .map(|&i| plan.values[i].shape.as_slice())
            .collect();
        let grain = word_grain(out.dtype);
        for (tile, r0, r1, local) in piece_rows(&out.layout) {
            let ob = self.value_buffer(op.output, tile);
            let mut wants: Vec<Vec<(usize, usize, usize)>> = vec![Vec::new(); op.inputs.len()];
            for r in r0..r1 {
                let runs = sources(kind, &in_shapes, &out.shape, r);
                let last = runs.len().saturating_sub(1);
                for (k, s) in runs.iter().enumerate() {
                    let v = &plan.values[op.inputs[s.input]];
                    let mut d = local + (r - r0) * cp + s.dst;
                    // The run ending the output row and its source row may take the source's
                    // zero padding along: to a whole 4-element unit when that stays within the
                    // output row's padding, else to a whole word.
                    let c_src = *v.shape.last().expect("rank >= 1");
                    let c1 = if k == last && s.c1 == c_src {
                        let unit = s.c1.div_ceil(PIECE_GRAIN) * PIECE_GRAIN;
                        if s.dst + unit - s.c0 <= cp {
                            unit
                        } else {
                            s.c1.div_ceil(grain) * grain
                        }
                    } else {
                        s.c1
                    };
                    if !s.c0.is_multiple_of(grain)
                        || !s.dst.is_multiple_of(grain)
                        || !(c1 - s.c0).is_multiple_of(grain)
                    {
                        return Err(CodegenError::internal(format!(
                            "%{}: a gather run of columns {}..{} to column {} is not whole words of {}",
                            op.name, s.c0, s.c1, s.dst, out.dtype
                        )));
                    }
                    for (a, b) in segment_exact(&v.shape, v.layout.group, s.row, s.c0, c1) {
                        wants[s.input].push((a, b, d));
                        d += b - a;
                    }
                }
            }
            let mut cps = Vec::new();
            for (i, want) in wants.iter().enumerate() {
                let v = op.inputs[i];
                cps.extend(self.gather(v, tile, plan.values[v].layout.group, want, ob));
            }
            let mut ops = Vec::new();
            let bytes = ((local + (r1 - r0) * cp) * eb) as u32;
            self.zero_gaps(ob, bytes, &cps, &mut ops);
            if !ops.is_empty() {
                steps.tiles.entry(tile).or_default().extend(ops);
            }
            steps.copies.extend(cps);
        }
        Ok(())
    }

    fn lower_transpose(
        &mut self,
        index: usize,
        _batch: usize,
        rows: usize,
        cols: usize,
        steps: &mut OpSteps,
    ) -> Result<(), CodegenError> {
        let (op, xv, ov) = self.operand_and_result(index);
        let (x, out) = (op.inputs[0], op.output);
        let eb = xv.dtype.bytes();
        let ci = *xv.shape.last().expect("rank >= 2");
        let co = *ov.shape.last().expect("rank >= 2");
        let unit = rows / co;
        let cpo = ov.layout.group;
        let rp = rows.div_ceil(4) * 4;
        debug_assert_eq!(unit * cpo, rp);
        let words = (rp * eb / 4) as u32;
        for (tile, r0, r1, local) in piece_rows(&ov.layout) {
            let ob = self.value_buffer(out, tile);
            let (v0, v1) = (r0 / unit, r1 / unit);
            let mut zero_ops = Vec::new();
            let mut run_ops = Vec::new();
            let mut b = v0 / cols;
            while b * cols < v1 {
                let c0 = v0.max(b * cols) - b * cols;
                let c1 = v1.min((b + 1) * cols) - b * cols;
                b += 1;
                if c1 <= c0 {
                    continue;
                }
                let c0w = c0 / 4 * 4;
                let c1w = (c1.div_ceil(4) * 4).min(cols.div_ceil(4) * 4);
                let w = c1w - c0w;
                let st_bytes = (rp * w * eb) as u32;
                let st = self.scratch_buffer(tile, st_bytes, format!("stage:{}.t", op.name));
                let mut want = Vec::new();
                let bb = b - 1;
                for r in 0..rows {
                    let runs = if cols == ci {
                        vec![Source {
                            input: 0,
                            row: bb * rows + r,
                            c0: c0w,
                            c1: c1w,
                            dst: 0,
                        }]
                    } else {
                        let f0 = (bb * rows + r) * cols + c0w;
                        flat_runs(f0, f0 + w, ci, 0, 0)
                    };
                    for s in runs {
                        let mut d = r * w + s.dst;
                        for (a, e) in segment(&xv.shape, xv.layout.group, s.row, s.c0, s.c1) {
                            want.push((a, e, d));
                            d += e - a;
                        }
                    }
                }
                let cps = self.gather(x, tile, xv.layout.group, &want, st);
                self.zero_gaps(st, st_bytes, &cps, &mut zero_ops);
                steps.copies.extend(cps);
                // Output rows over the workers; with fewer rows than workers, each row's words
                // are shared out too.
                let n_out = (c1 - c0) as u32;
                let parts = (WORKERS / n_out.min(WORKERS)).max(1);
                let per_word = 4 / eb as u32;
                for (j0, j1) in split(n_out, WORKERS.min(n_out)) {
                    if j1 <= j0 {
                        continue;
                    }
                    let vr = bb * cols + c0 + j0 as usize;
                    let out_off = ((local + (vr * unit - r0) * cpo) * eb) as u32;
                    let in_off = ((c0 - c0w + j0 as usize) * eb) as u32;
                    let word_parts = if j1 - j0 == 1 { parts } else { 1 };
                    for (w0, w1) in split(words, word_parts) {
                        if w1 <= w0 {
                            continue;
                        }
                        run_ops.push(SupOp::Run(
                            Kernel::Transpose { bytes: eb as u32 },
                            TransposeState {
                                input: (st, in_off + w0 * per_word * (w * eb) as u32),
                                out: (ob, out_off + 4 * w0),
                                rows: j1 - j0,
                                in_stride: (w * eb) as u32,
                                out_stride: (unit * cpo * eb) as u32,
                                words: w1 - w0,
                            }
                            .into(),
                            row_kernels::transpose_slots(eb as u32, j1 - j0, w1 - w0),
                        ));
                    }
                }
            }
            let ops = steps.tiles.entry(tile).or_default();
            if !zero_ops.is_empty() {
                ops.extend(zero_ops);
                ops.push(SupOp::WaitW);
            }
            ops.extend(run_ops);
        }
        Ok(())
    }

    /// The rows `in_rows` of `v` (one per output row, in order) staged contiguously as
    /// row-major rows on `tile`: the value's own buffer when it is already there (`identity`:
    /// the caller found `v` in the row layout with the same rows), else a staging buffer filled by `copies` and zero-fill
    /// `ops`. With `grouped`, a value stored in several column groups is gathered group by
    /// group (whole runs of rows per copy) and regrouped on tile into rows of `groups x group`
    /// elements. Returns the buffer, the byte offset of the first row and the row stride.
    #[allow(clippy::too_many_arguments)]
    fn stage_rows(
        &mut self,
        v: DevValueId,
        tile: u32,
        in_rows: &[usize],
        identity: bool,
        grouped: bool,
        what: &str,
        copies: &mut Vec<Copy>,
        ops: &mut Vec<SupOp>,
    ) -> (BufferId, u32, u32) {
        let plan = self.plan;
        let val = &plan.values[v];
        let cp = row_group(&val.shape);
        let eb = val.dtype.bytes();
        if identity {
            let p = val
                .layout
                .pieces
                .iter()
                .find(|p| p.tile == tile)
                .expect("the same rows on the same tile");
            debug_assert_eq!(p.start / cp, in_rows[0]);
            return (
                self.value_buffer(v, tile),
                (p.local * eb) as u32,
                (cp * eb) as u32,
            );
        }
        let c = *val.shape.last().unwrap_or(&1);
        let gx = val.layout.group;
        let groups = c.div_ceil(gx);
        let n = in_rows.len();
        if grouped && groups > 1 {
            let bytes = (groups * n * gx * eb) as u32;
            let a_buf = self.scratch_buffer(tile, bytes, format!("stage:{what}.groups"));
            let mut want = Vec::new();
            for j in 0..groups {
                for (k, &r) in in_rows.iter().enumerate() {
                    for (a, b) in segment(&val.shape, gx, r, j * gx, (j + 1) * gx) {
                        want.push((a, b, (j * n + k) * gx));
                    }
                }
            }
            let cps = self.gather(v, tile, gx, &want, a_buf);
            self.zero_gaps(a_buf, bytes, &cps, ops);
            copies.extend(cps);
            let b_buf = self.scratch_buffer(tile, bytes, format!("stage:{what}.rows"));
            ops.push(SupOp::WaitW);
            let seg_bytes = (gx * eb) as u32;
            let row_bytes = groups as u32 * seg_bytes;
            Copy2d::regroup(
                Regroup::ToRows,
                (a_buf, 0),
                (b_buf, 0),
                (n as u32, row_bytes),
                groups as u32,
                seg_bytes,
            )
            .push(WORKERS, ops);
            return (b_buf, 0, row_bytes);
        }
        let bytes = (n * cp * eb) as u32;
        let st = self.scratch_buffer(tile, bytes, format!("stage:{what}"));
        let mut want = Vec::new();
        for (k, &r) in in_rows.iter().enumerate() {
            let mut d = k * cp;
            for (a, b) in segment(&val.shape, val.layout.group, r, 0, c) {
                want.push((a, b, d));
                d += b - a;
            }
        }
        let cps = self.gather(v, tile, val.layout.group, &want, st);
        self.zero_gaps(st, bytes, &cps, ops);
        copies.extend(cps);
        (st, 0, (cp * eb) as u32)
    }

    fn lower_row_kernel(
        &mut self,
        index: usize,
        rop: &RowOp,
        steps: &mut OpSteps,
    ) -> Result<(), CodegenError> {
        let (op, xv, ov) = self.operand_and_result(index);
        let (x, out) = (op.inputs[0], op.output);
        let ty = elem(xv.dtype).expect("planned on f32/f16");
        let eb = xv.dtype.bytes();
        let c = *xv.shape.last().unwrap_or(&1);
        let go = ov.layout.group;
        let o_groups = ov.shape.last().unwrap_or(&1).div_ceil(go);
        // The output is written as rows of `o_groups x go` elements; in the grouped layout
        // through a scratch buffer regrouped afterwards.
        let direct = o_groups == 1;
        let sq = if xv.shape.len() >= 2 {
            xv.shape[xv.shape.len() - 2]
        } else {
            1
        };
        let tiles_used = self.plan.tiles_used;
        let x_in_rows = xv.layout == row_layout(&xv.shape, tiles_used, 1);
        for (tile, r0, r1) in tile_rows(row_count(&ov.shape), tiles_used) {
            let rows: Vec<usize> = (r0..r1).collect();
            let n_rows = r1 - r0;
            let mut zero_ops = Vec::new();
            let (xb, xoff, sx) = self.stage_rows(
                x,
                tile,
                &rows,
                x_in_rows,
                true,
                &op.name,
                &mut steps.copies,
                &mut zero_ops,
            );
            let ob = self.value_buffer(out, tile);
            let o_row = (o_groups * go * eb) as u32;
            let wb = if direct {
                ob
            } else {
                let bytes = n_rows as u32 * o_row;
                self.scratch_buffer(tile, bytes, format!("stage:{}.out", op.name))
            };
            let mut vertices: Vec<(usize, usize)> = Vec::new();
            for (a, b) in split((r1 - r0) as u32, WORKERS) {
                let (mut a, b) = (a as usize + r0, b as usize + r0);
                if matches!(rop, RowOp::Softmax { causal: true }) {
                    // A vertex's rows stay within one matrix (the mask restarts at row 0).
                    while a < b {
                        let e = b.min((a / sq + 1) * sq);
                        vertices.push((a, e));
                        a = e;
                    }
                } else if b > a {
                    vertices.push((a, b));
                }
            }
            // Fewer rows than workers: one worker per row forms the row's statistics, then
            // every worker applies them to a part of a row.
            let split_rows = matches!(rop, RowOp::Softmax { .. } | RowOp::LayerNorm { .. })
                && n_rows < WORKERS as usize;
            let stats = if split_rows {
                Some(self.prog.buffer(
                    tile,
                    (n_rows * 8) as u32 + OVERREAD_BYTES,
                    Region::Any,
                    format!("stats:{}", op.name),
                ))
            } else {
                None
            };
            let ops = steps.tiles.entry(tile).or_default();
            if !zero_ops.is_empty() {
                ops.extend(zero_ops);
                ops.push(SupOp::WaitW);
            }
            if let Some(stats) = stats {
                let softmax = matches!(rop, RowOp::Softmax { .. });
                let causal = matches!(rop, RowOp::Softmax { causal: true });
                let valid = |a: usize| if causal { c.min(a % sq + 1) } else { c };
                for k in 0..n_rows {
                    let a = r0 + k;
                    let input = (xb, xoff + k as u32 * sx);
                    let out = (stats, k as u32 * 8);
                    let (kernel, state, slots) = match rop {
                        RowOp::Softmax { .. } => (
                            Kernel::SoftmaxStats { ty },
                            SoftmaxState {
                                input,
                                out,
                                rows: 1,
                                in_stride: sx,
                                out_stride: 8,
                                columns: c as u32,
                                l0: valid(a) as u32,
                                dl: 0,
                            }
                            .into(),
                            row_kernels::softmax_slots(
                                ty,
                                true,
                                1,
                                c as u32,
                                valid(a) as u32,
                                0,
                                0,
                            ),
                        ),
                        RowOp::LayerNorm { epsilon } => (
                            Kernel::LayerNormStats { ty },
                            LayerNormState {
                                input,
                                out,
                                rows: 1,
                                in_stride: sx,
                                columns: c as u32,
                                epsilon_bits: epsilon.to_bits(),
                                columns_f32_bits: (c as f32).to_bits(),
                                out_stride: 8,
                            }
                            .into(),
                            row_kernels::layer_norm_slots(ty, true, 1, c as u32, 0),
                        ),
                        _ => unreachable!("softmax or layer norm"),
                    };
                    ops.push(SupOp::Run(kernel, state, slots));
                }
                ops.push(SupOp::WaitW);
                let chunks = WORKERS / n_rows as u32;
                let pair_bytes = 2 * eb as u32;
                let pairs = o_row / pair_bytes;
                for k in 0..n_rows {
                    let l = valid(r0 + k) as u32;
                    let (pv, odd) = (l / 2, l % 2);
                    for (pa, pb) in split(pairs, chunks) {
                        if pb <= pa {
                            continue;
                        }
                        let full = pb.min(pv).saturating_sub(pa);
                        let odd_here = u32::from(odd == 1 && pa <= pv && pv < pb);
                        let zero_words = (pb - pa - full - odd_here) * pair_bytes / 4;
                        ops.push(SupOp::Run(
                            Kernel::RowApply { ty, softmax },
                            RowApplyState {
                                input: (xb, xoff + k as u32 * sx + pa * pair_bytes),
                                out: (wb, k as u32 * o_row + pa * pair_bytes),
                                stats: (stats, k as u32 * 8),
                                full_pairs: full,
                                odd: odd_here,
                                zero_words,
                            }
                            .into(),
                            row_kernels::row_apply_slots(ty, softmax, full, odd_here, zero_words),
                        ));
                    }
                }
                vertices.clear();
            }
            for (a, b) in vertices {
                let n = (b - a) as u32;
                let input = (xb, xoff + (a - r0) as u32 * sx);
                let out = (wb, (a - r0) as u32 * o_row);
                let (kernel, state, slots) = match rop {
                    RowOp::Reduce { max } => (
                        Kernel::RowReduce { ty, max: *max },
                        RowReduceState {
                            input,
                            out,
                            rows: n,
                            in_stride: sx,
                            columns: c as u32,
                        }
                        .into(),
                        row_kernels::row_reduce_slots(ty, n, c as u32),
                    ),
                    RowOp::Softmax { causal } => {
                        let (l0, dl) = if *causal {
                            ((a % sq + 1) as u32, 1)
                        } else {
                            (c as u32, 0)
                        };
                        (
                            Kernel::Softmax { ty },
                            SoftmaxState {
                                input,
                                out,
                                rows: n,
                                in_stride: sx,
                                out_stride: o_row,
                                columns: c as u32,
                                l0,
                                dl,
                            }
                            .into(),
                            row_kernels::softmax_slots(ty, false, n, c as u32, l0, dl, o_row / 4),
                        )
                    }
                    RowOp::LayerNorm { epsilon } => (
                        Kernel::LayerNorm { ty },
                        LayerNormState {
                            input,
                            out,
                            rows: n,
                            in_stride: sx,
                            columns: c as u32,
                            epsilon_bits: epsilon.to_bits(),
                            columns_f32_bits: (c as f32).to_bits(),
                            out_stride: o_row,
                        }
                        .into(),
                        row_kernels::layer_norm_slots(ty, false, n, c as u32, o_row / 4),
                    ),
                    _ => unreachable!("row kernels only"),
                };
                ops.push(SupOp::Run(kernel, state, slots));
            }
            if !direct {
                // Scratch rows to the grouped layout: [group][row][go] on this tile.
                ops.push(SupOp::WaitW);
                let seg_bytes = (go * eb) as u32;
                let rows = (n_rows as u32, o_row);
                Copy2d::regroup(
                    Regroup::ToGroups,
                    (wb, 0),
                    (ob, 0),
                    rows,
                    o_groups as u32,
                    seg_bytes,
                )
                .push(WORKERS, ops);
            }
        }
        Ok(())
    }

    fn lower_broadcast(
        &mut self,
        index: usize,
        bop: BinOp,
        steps: &mut OpSteps,
    ) -> Result<(), CodegenError> {
        let plan = self.plan;
        let op = &plan.ops[index];
        let out = op.output;
        let ov = &plan.values[out];
        let ty = elem(ov.dtype).expect("planned on f32/f16");
        let eb = ov.dtype.bytes();
        let n = ov.shape.len();
        let co = ov.shape[n - 1];
        let cpo = ov.layout.group;
        let lead = &ov.shape[..n - 1];
        let scalar: Vec<bool> = op
            .inputs
            .iter()
            .map(|&i| plan.values[i].shape[n - 1] == 1 && co > 1)
            .collect();
        let in_rows_layout: Vec<bool> = op
            .inputs
            .iter()
            .map(|&i| {
                let v = &plan.values[i];
                v.layout == row_layout(&v.shape, plan.tiles_used, 1)
            })
            .collect();
        for (tile, r0, r1, local) in piece_rows(&ov.layout) {
            let mut zero_ops = Vec::new();
            let mut staged = Vec::new();
            for (k, &i) in op.inputs.iter().enumerate() {
                let s = &plan.values[i].shape;
                let in_rows: Vec<usize> = (r0..r1)
                    .map(|r| {
                        let mut idx = unflatten(r, lead);
                        for (d, x) in idx.iter_mut().enumerate() {
                            if s[d] == 1 {
                                *x = 0;
                            }
                        }
                        flatten(&idx, &s[..n - 1])
                    })
                    .collect();
                let identity = s[..n - 1] == *lead && in_rows_layout[k];
                staged.push(self.stage_rows(
                    i,
                    tile,
                    &in_rows,
                    identity,
                    false,
                    &op.name,
                    &mut steps.copies,
                    &mut zero_ops,
                ));
            }
            let ob = self.value_buffer(out, tile);
            let o_off = (local * eb) as u32;
            let ops = steps.tiles.entry(tile).or_default();
            if !zero_ops.is_empty() {
                ops.extend(zero_ops);
                ops.push(SupOp::WaitW);
            }
            let rows = (r1 - r0) as u32;
            match (scalar[0], scalar[1]) {
                (false, true) | (true, false) => {
                    let reversed = scalar[0];
                    let ((xb, xo, _), (yb, yo, _)) = if reversed {
                        (staged[1], staged[0])
                    } else {
                        (staged[0], staged[1])
                    };
                    let stride = (cpo * eb) as u32;
                    if rows < WORKERS {
                        // Fewer rows than workers: each row's columns are shared out in pairs;
                        // the last part of a row also writes its padding.
                        let pair_bytes = 2 * eb as u32;
                        for k in 0..rows {
                            for (pa, pb) in split(cpo as u32 / 2, WORKERS / rows) {
                                if pb <= pa {
                                    continue;
                                }
                                let c0 = 2 * pa;
                                let cols = (2 * pb).min(co as u32).saturating_sub(c0);
                                let part = (pb - pa) * pair_bytes;
                                let at = k * stride + pa * pair_bytes;
                                ops.push(row_scalar(
                                    ty,
                                    bop,
                                    reversed,
                                    RowScalarState {
                                        x: (xb, xo + at),
                                        y: (yb, yo + k * 4 * eb as u32),
                                        out: (ob, o_off + at),
                                        rows: 1,
                                        stride: part,
                                        columns: cols,
                                        y_stride: 4 * eb as u32,
                                    },
                                ));
                            }
                        }
                    }
                    for (a, b) in split(if rows < WORKERS { 0 } else { rows }, WORKERS) {
                        if b <= a {
                            continue;
                        }
                        ops.push(row_scalar(
                            ty,
                            bop,
                            reversed,
                            RowScalarState {
                                x: (xb, xo + a * stride),
                                y: (yb, yo + a * 4 * eb as u32),
                                out: (ob, o_off + a * stride),
                                rows: b - a,
                                stride,
                                columns: co as u32,
                                y_stride: 4 * eb as u32,
                            },
                        ));
                    }
                }
                _ => {
                    let ((xb, xo, _), (yb, yo, _)) = (staged[0], staged[1]);
                    let vectors = rows * (cpo * eb) as u32 / 8;
                    for (v0, v1) in split(vectors, WORKERS) {
                        if v1 <= v0 {
                            continue;
                        }
                        ops.push(SupOp::Run(
                            Kernel::Binary { ty, op: bop },
                            BinaryState {
                                a: (xb, xo + v0 * 8),
                                b: (yb, yo + v0 * 8),
                                out: (ob, o_off + v0 * 8),
                                vectors: v1 - v0,
                            }
                            .into(),
                            kernels::binary_slots(ty, bop, v1 - v0),
                        ));
                    }
                }
            }
        }
        if bop == BinOp::Div && !scalar.iter().any(|&s| s) {
            self.pad_clears(index, &mut steps.tiles);
        }
        Ok(())
    }
}

impl FamilyOp for RowOp {
    fn lower(&self, lowerer: &mut Lowerer<'_>, index: usize) -> Result<(), CodegenError> {
        lowerer.lower_steps(index, |l, steps| l.lower_rows(index, self, steps))
    }
}
