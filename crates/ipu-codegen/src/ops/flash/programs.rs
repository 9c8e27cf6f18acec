//! The tile programs of a flash attention's items and merges: an item's AMP rounds, masks,
//! softmax and rescales (`item_ops`), a merge's combine (`merge_ops`). The lowering's scores
//! and merge steps run them on the buffers they place; the model (`super::model`) costs
//! them on stand-in buffers (`COSTING_BUFFERS`).

use super::geometry::FlashGeometry;
use super::layout::FlashPlan;
use crate::lower::*;
use crate::program::*;
use ipu_kernels::flash::{
    GROUP_ROW_BYTES, flash_combine_slots, flash_rescale_slots, flash_softmax_slots,
};
use ipu_kernels::state::*;
use ipu_kernels::{self as kernels, Kernel};

/// Bytes per row of one column group ([`GROUP_ROW_BYTES`]), shortened.
pub(super) const GRB: u32 = GROUP_ROW_BYTES;

/// The buffers of one item.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ItemBuffers {
    pub q: BufferId,
    pub kt: BufferId,
    pub v: BufferId,
    pub s: BufferId,
    pub p: BufferId,
    pub t: BufferId,
    pub part: BufferId,
    /// The item's mask, `[keys / cols][mask rows][cols]` (partials type), when there is one.
    pub mask: Option<BufferId>,
    /// The rows' rescaling factors between sub-blocks, a pair a row
    /// ([`FlashGeometry::factor_run`]).
    pub alpha: Option<BufferId>,
}

/// The AMP rounds of `out[R, groups] (+)= in[R, kblocks] x W` over `rows` rows: for output
/// group `g`, round `kk` loads the weights at `w_off(g, kk)`; the last round of a group writes
/// `out` (group stride `R * 32`), earlier ones alternate with the scratch `t`.
#[allow(clippy::too_many_arguments)]
fn amp_rounds(
    ops: &mut Vec<SupOp>,
    table: bool,
    rows: u32,
    groups: usize,
    kblocks: usize,
    input: BufferId,
    w: BufferId,
    w_off: impl Fn(usize, usize) -> u32,
    out: BufferId,
    t: BufferId,
    r_total: u32,
    accumulate: bool,
) {
    // With `accumulate`, the first round adds to what `out` holds (`kblocks` must be even, so
    // the first round writes `t` and the last writes `out`).
    debug_assert!(!accumulate || kblocks.is_multiple_of(2));
    let bounds = even_bounds(rows);
    let mut prev_out = None;
    // Whether a round of the chain so far had no partials-in (its zeros stay in the workers'
    // registers).
    let mut zeros = false;
    for g in 0..groups {
        let out_off = g as u32 * r_total * GRB;
        for kk in 0..kblocks {
            ops.push(SupOp::AmpW(w, w_off(g, kk)));
            let last = (kblocks - 1 - kk).is_multiple_of(2);
            let (dst, dst_off, src, src_off) = if last {
                (out, out_off, t, 0)
            } else {
                (t, 0, out, out_off)
            };
            let partials = kk > 0 || accumulate;
            if !table && bounds.windows(2).all(|b| b[1] > b[0]) {
                // Every worker has rows: one row-bounds state for all six (`Kernel::AmpAll`).
                let st = AmpAllState {
                    input: (input, kk as u32 * r_total * GRB),
                    partials: if partials {
                        StateWord::Addr(src, src_off)
                    } else {
                        StateWord::Const(0)
                    },
                    out: (dst, dst_off),
                    bounds,
                };
                let most = bounds.windows(2).map(|b| b[1] - b[0]).max().unwrap_or(0);
                ops.push(SupOp::RunAll(
                    Kernel::AmpAll { partials },
                    st.into(),
                    kernels::amp_all_slots(most, partials),
                ));
            } else if amp_chains(rows) {
                // One chain over all the rounds: each stores the last row the round before it
                // left in the AMP, and only the last drains its own.
                let n = g * kblocks + kk;
                debug_assert_eq!(GRB, AMP_CHAIN_ROW_BYTES);
                ops.push(amp_chain_launch(
                    (input, kk as u32 * r_total * GRB),
                    partials.then_some((src, src_off)),
                    (dst, dst_off),
                    rows,
                    (n, prev_out, zeros),
                    n + 1 == groups * kblocks,
                ));
                zeros |= !partials;
            } else {
                ops.push(amp_launch(
                    ((input, kk as u32 * r_total * GRB), GRB),
                    partials.then_some((src, src_off)),
                    ((dst, dst_off), GRB),
                    rows,
                    true,
                ));
            }
            prev_out = Some((dst, dst_off));
            ops.push(SupOp::WaitW);
        }
    }
}

/// The compute of chunk `chunk` of item `i` ([`FlashGeometry::chunks`]): both products, the
/// masks and the softmax of its sub-blocks, with the chunk's keys in `b`'s `kᵀ`, `v` and mask.
pub(crate) fn item_ops(fp: &FlashPlan, i: usize, b: &ItemBuffers, chunk: usize) -> Vec<SupOp> {
    let g = &fp.geo;
    let it = fp.items[i];
    let amp = g.amp();
    let (kb, cols) = (amp.k as usize, amp.columns as usize);
    let r = g.rows as u32;
    let ab = g.ab() as u32;
    let lkeys = cols.max(kb);
    // Live keys: a prefix of the block that some valid row may see (a causal mask hides the
    // rest from every row, the sequence ends before the rest). Rounds, masks and softmax cover
    // only them; the probabilities of the rest are never read.
    let valid_keys = fp.valid_keys(i);
    let rows_valid = fp.valid_rows(i);
    let mut live = valid_keys;
    if g.causal {
        live = live.min((it.q0 + rows_valid).saturating_sub(it.k0));
    }
    let live = live.max(1);
    // The chunk's keys `c0..c0 + clen` of the item sit from the start of its buffers.
    let (c0, clen) = g.chunks()[chunk];
    let nkk = g.chunk_keys().div_ceil(kb) * kb;
    let gv = g.gv() as u32;
    let mut ops = vec![SupOp::AmpCfg(g.mode)];
    for (si, (k_s, len)) in g.sub_blocks().into_iter().enumerate() {
        if k_s < c0 {
            continue;
        }
        if k_s >= live || k_s >= c0 + clen {
            break;
        }
        // Keys of this sub-block some row sees, in whole super-groups; after the first, an
        // even number of k blocks (the accumulation ping-pongs back into the partial output).
        let mut sub = ((live - k_s).min(len)).div_ceil(lkeys) * lkeys;
        if si > 0 {
            sub = (sub.div_ceil(2 * kb) * 2 * kb).min(len);
        }
        let kg0 = (k_s - c0) / cols;
        // S = q kᵀ: output groups of `cols` keys, k blocks of `kb` dimensions.
        amp_rounds(
            &mut ops,
            g.table,
            r,
            sub / cols,
            g.d / kb,
            b.q,
            b.kt,
            |grp, kk| (((kg0 + grp) * g.d + kk * kb) * cols) as u32 * ab,
            b.s,
            b.t,
            r,
            false,
        );
        // The mask operand, added to the scores (scaled first unless `q` was): before the
        // causal and padding masks, which then overwrite the keys they hide.
        if let Some(mask) = b.mask.filter(|_| g.mask.is_some()) {
            let mr = g.mask_rows() as u32;
            let step = if mr == 1 { 0 } else { GRB };
            for (r0, r1) in split(r, WORKERS) {
                if r1 > r0 {
                    let state = FlashMaskState {
                        s: (b.s, r0 * GRB),
                        mask: (mask, (kg0 as u32 * mr + r0 * step / GRB) * GRB),
                        rows: r1 - r0,
                        groups: (sub / cols) as u32,
                        group_stride: r * GRB,
                        mask_group_stride: mr * GRB,
                        mask_row_step: step,
                        scale_bits: g.scale.to_bits(),
                    };
                    let scaled = !g.prescale();
                    ops.push(SupOp::Run(
                        Kernel::FlashMask {
                            s: g.p_elem(),
                            scaled,
                            broadcast: step == 0,
                        },
                        state.into(),
                        kernels::flash::flash_mask_slots(
                            g.p_elem(),
                            scaled,
                            step == 0,
                            r1 - r0,
                            (sub / cols) as u32,
                        ),
                    ));
                }
            }
            ops.push(SupOp::WaitW);
        }
        // Masks: keys after the query (causal) and keys past the sequence become -inf, for
        // the rows whose mask reaches into the group. Two waves (causal, then padding): both
        // may rewrite the same rows.
        let mut masks = [Vec::new(), Vec::new()];
        for grp in 0..sub / cols {
            let base = (k_s + grp * cols) as i64;
            let mut push = |wave: usize, start: i64, step: u32| {
                // Rows `r` with `start + r * step < cols`.
                let rows = if step == 0 {
                    r
                } else {
                    (cols as i64 - start).clamp(0, r as i64) as u32
                };
                for (r0, r1) in split(rows, WORKERS) {
                    if r1 > r0 {
                        let off = grp as u32 * r * GRB + r0 * GRB;
                        let f32_scores = g.p == ipu_graph::DType::F32;
                        let (kernel, fill) = if f32_scores {
                            (Kernel::MaskRows, f32::NEG_INFINITY.to_bits())
                        } else {
                            (Kernel::MaskRowsF16, 0xFC00_FC00)
                        };
                        let state = MaskRowsState {
                            src: (b.s, off),
                            dst: (b.s, off),
                            rows: r1 - r0,
                            start: (start + (r0 * step) as i64) as i32 as u32,
                            valid: cols as u32,
                            stride: cols as u32,
                            fill_bits: fill,
                            start_step: step,
                        };
                        let slots = kernels::mask_rows_slots(!f32_scores, &state);
                        masks[wave].push(SupOp::Run(kernel, state.into(), slots));
                    }
                }
            };
            if g.causal {
                // Row `r` sees keys `k0 ..= q0 + r`.
                let start = it.q0 as i64 + 1 - it.k0 as i64 - base;
                if start < cols as i64 {
                    push(0, start, 1);
                }
            }
            let pad = valid_keys as i64 - base;
            if pad < cols as i64 {
                push(1, pad, 0);
            }
        }
        for wave in masks {
            if !wave.is_empty() {
                ops.extend(wave);
                ops.push(SupOp::WaitW);
            }
        }
        let running = si > 0;
        let stride = kernels::flash::baked_stride(r * GRB);
        let kernel = Kernel::FlashSoftmax {
            s: g.p_elem(),
            a: g.a_elem(),
            cols: cols as u32,
            kb: kb as u32,
            scaled: g.softmax_scaled(),
            running,
            stride,
            floor: g.softmax_floored(),
        };
        for (r0, r1) in split(r, WORKERS) {
            if r1 > r0 {
                ops.push(SupOp::Run(
                    kernel,
                    FlashSoftmaxState {
                        s: (b.s, r0 * GRB),
                        p: (b.p, r0 * GRB),
                        stats: (b.part, (gv * r + r0) * GRB),
                        rows: r1 - r0,
                        super_groups: (sub / lkeys) as u32,
                        group_stride: r * GRB,
                        scale_bits: g.scale.to_bits(),
                        alpha: match b.alpha {
                            Some(alpha) if running => StateWord::Addr(alpha, r0 * 8),
                            _ => StateWord::Const(0),
                        },
                    }
                    .into(),
                    flash_softmax_slots(
                        g.p_elem(),
                        g.a_elem(),
                        cols as u32,
                        kb as u32,
                        g.softmax_scaled(),
                        running,
                        r1 - r0,
                        (sub / lkeys) as u32,
                        stride != 0,
                        g.softmax_floored(),
                    ),
                ));
            }
        }
        ops.push(SupOp::WaitW);
        if running {
            // The partial output so far, rescaled to the new maxima.
            for (r0, r1) in split(r, WORKERS) {
                if r1 > r0 {
                    ops.push(SupOp::Run(
                        Kernel::FlashRescale { p: g.p_elem() },
                        FlashRescaleState {
                            o: (b.part, r0 * GRB),
                            factors: match b.alpha {
                                Some(alpha) => (alpha, r0 * 8),
                                None => (b.part, (gv * r + r0) * GRB),
                            },
                            rows: r1 - r0,
                            groups: gv,
                            group_stride: r * GRB,
                        }
                        .into(),
                        flash_rescale_slots(g.p_elem(), r1 - r0, gv),
                    ));
                }
            }
            ops.push(SupOp::WaitW);
        }
        // O (+)= P v: output groups of `cols` dimensions, k blocks of `kb` keys.
        amp_rounds(
            &mut ops,
            g.table,
            r,
            g.gv(),
            sub / kb,
            b.p,
            b.v,
            |grp, kk| ((grp * nkk + k_s - c0 + kk * kb) * cols) as u32 * ab,
            b.part,
            b.t,
            r,
            running,
        );
    }
    ops
}

/// Where a merge reads a source's rows: `(O of row 0, group stride, statistics of row 0)`.
pub(crate) type Source = (BufferId, u32, u32, u32);

/// Bytes of a merge worker's scratch for `sources` sources: a row of `dv` f32, or the
/// staged kernel's weight pairs after an empty one.
pub(crate) fn combine_scratch_bytes(g: &FlashGeometry, sources: usize) -> u32 {
    (g.dv as u32 * 4).max(8 * (sources as u32 + 1))
}

/// The compute of a merge of `rows` rows from `sources` into `out` from byte `out_at`
/// (`[dv / gout][rows][gout]`). The first source is the merging item's own partial; with f32
/// partials the others are consecutive runs of one stage buffer (`[gv + 1][rows][32 bytes]`
/// each), which the staged kernel walks (`kernels::flash::combine_stage`).
pub(crate) fn merge_ops(
    g: &FlashGeometry,
    rows: u32,
    sources: &[Source],
    out: BufferId,
    out_at: u32,
    scratch: BufferId,
) -> Vec<SupOp> {
    let amp = g.amp();
    let gout = g.gout() as u32;
    let ob = g.out.bytes() as u32;
    let stage =
        kernels::flash::combine_stage(g.p_elem(), g.gv() as u32, rows, sources.len() as u32);
    let kernel = Kernel::FlashCombine {
        p: g.p_elem(),
        out: g.out_elem(),
        cols: amp.columns,
        gout,
        dv: g.dv as u32,
        stage,
    };
    let scratch_bytes = combine_scratch_bytes(g, sources.len());
    let mut ops = Vec::new();
    for (w, (r0, r1)) in split(rows, WORKERS).enumerate() {
        if r1 <= r0 {
            continue;
        }
        let st = FlashCombineState {
            out: (out, out_at + r0 * gout * ob),
            out_group_stride: rows * gout * ob,
            rows: r1 - r0,
            scratch: (scratch, w as u32 * scratch_bytes),
            sources: sources
                .iter()
                .map(|&(buf, base, gs, stats)| CombineSource {
                    o: (buf, base + r0 * GRB),
                    group_stride: gs,
                    stats: (buf, stats + r0 * GRB),
                })
                .collect(),
        };
        ops.push(SupOp::Run(
            kernel,
            st.into(),
            flash_combine_slots(
                g.p_elem(),
                g.out_elem(),
                amp.columns,
                gout,
                g.dv as u32,
                r1 - r0,
                sources.len() as u32,
                stage != 0,
            ),
        ));
    }
    ops.push(SupOp::WaitW);
    ops
}

/// Dummy buffers for costing.
pub(crate) const COSTING_BUFFERS: ItemBuffers = ItemBuffers {
    q: BufferId(0),
    kt: BufferId(1),
    v: BufferId(2),
    s: BufferId(3),
    p: BufferId(4),
    t: BufferId(5),
    part: BufferId(6),
    mask: Some(BufferId(7)),
    alpha: Some(BufferId(8)),
};
