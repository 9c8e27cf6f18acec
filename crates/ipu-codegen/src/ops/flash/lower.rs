//! Lowering of a planned flash attention (`plan::flash`): steps
//!
//! 1. `NAME.homes` (only when an input is not already laid out on its homes): exchange;
//! 2. `NAME.prep`: homes cast FP8 to f16, transpose `k` into the AMP's weight layout and
//!    regroup `v` into it, and cast the mask to the partials type (a bool one made additive);
//! 3. `NAME.distribute`: every item receives its rows of `q` and its keys of `kᵀ` and `v`
//!    (multicast to the items of one key block), and its mask's rows per key group;
//! 4. `NAME.scores`: per item, `S = q kᵀ` on the AMP, the mask operand (`flash_mask`), the
//!    causal and padding masks, `flash_softmax`, `O = P v`;
//! 5. `NAME.merge` (exchange, when a query block has several key blocks) and `NAME.merge`
//!    (compute): `flash_combine` on the merging tiles, into the output's layout.

use ipu_target::AmpMode;
use rayon::prelude::*;

use std::collections::{BTreeMap, BTreeSet};

use super::geometry::FlashGeometry;
use super::homes::prep_ops;
use super::layout::FlashPlan;
use crate::cost::estimate;
use crate::error::CodegenError;
use crate::lower::*;
use crate::operator_plan::{DevOp, DevValue, DevValueId, FamilyOp};
use crate::program::*;
use ipu_kernels::flash::{
    GROUP_ROW_BYTES, flash_combine_slots, flash_rescale_slots, flash_softmax_slots,
};
use ipu_kernels::state::*;
use ipu_kernels::{self as kernels, Kernel, OVERREAD_BYTES};

const GRB: u32 = GROUP_ROW_BYTES;

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

impl FamilyOp for FlashPlan {
    fn lower(&self, lowerer: &mut Lowerer<'_>, index: usize) -> Result<(), CodegenError> {
        lowerer.lower_flash(index, self)
    }

    fn macs(&self, _op: &DevOp, _values: &[DevValue]) -> Option<(u64, AmpMode)> {
        let g = &self.geo;
        let pairs: u64 = if g.causal {
            (0..g.sq).map(|q| (q + 1).min(g.sk) as u64).sum()
        } else {
            (g.sq * g.sk) as u64
        };
        Some((g.batch as u64 * pairs * (g.d + g.dv) as u64, g.mode))
    }
}

impl Lowerer<'_> {
    /// Lowers flash attention `index`, mapped by `fp`, into its own steps: homes,
    /// distribution, scores and merge.
    pub(crate) fn lower_flash(&mut self, index: usize, fp: &FlashPlan) -> Result<(), CodegenError> {
        let op = &self.plan.ops[index];
        let name = op.name.clone();
        let (ins, out) = ([op.inputs[0], op.inputs[1], op.inputs[2]], op.output);
        let mask = op.inputs.get(3).copied();
        let (homes, mask_home) = self.flash_homes(&name, fp, ins, mask);
        let bufs = self.flash_scores(&name, fp, &homes, &mask_home);
        self.flash_merge(&name, fp, out, &bufs);
        Ok(())
    }

    /// Steps `NAME.homes` (when an input is laid out elsewhere) and `NAME.prep`: each input on
    /// its homes, then `q` (cast, scaled), `kᵀ` and `v` (cast, regrouped) and the mask (cast to
    /// the partials type, made additive) ready to send. Returns the buffers holding them per
    /// home tile.
    #[allow(clippy::type_complexity)]
    fn flash_homes(
        &mut self,
        name: &str,
        fp: &FlashPlan,
        ins: [DevValueId; 3],
        mask: Option<DevValueId>,
    ) -> ([BTreeMap<u32, BufferId>; 3], BTreeMap<u32, BufferId>) {
        let g = fp.geo.clone();
        let cols = g.amp().columns as usize;
        let dims = [g.d, g.d, g.dv];
        // Homes: staging of each input in group `hg` ([dims / hg][positions][hg] per tile).
        let hgs = fp.home_groups();
        let mut home_copies = Vec::new();
        let mut staging: [BTreeMap<u32, BufferId>; 3] = Default::default();
        for x in 0..3 {
            let v = ins[x];
            let layout = fp.home_layout(x, hgs[x]);
            let eb = self.eb(v);
            let same = self.plan.values[v].layout == layout;
            for (&tile, &n) in &fp.home_positions[x] {
                let buf = if same {
                    self.value_buffer(v, tile)
                } else {
                    let bytes = (n * dims[x]) as u32 * eb + OVERREAD_BYTES;
                    let st = self.prog.buffer(
                        tile,
                        align8(bytes as u64) as u32,
                        Region::Any,
                        format!("stage:{name}.home{x}"),
                    );
                    let want = layout.ranges_on(tile);
                    home_copies.extend(self.gather(v, tile, hgs[x], &want, st));
                    st
                };
                staging[x].insert(tile, buf);
            }
        }
        // The mask on its homes, in its own type, in the scores' group.
        let mut mask_staging: BTreeMap<u32, BufferId> = BTreeMap::new();
        if let Some(v) = mask {
            let layout = fp.mask_home_layout();
            let eb = self.eb(v);
            let same = self.plan.values[v].layout == layout;
            for (&tile, &n) in &fp.mask_positions {
                let buf = if same {
                    self.value_buffer(v, tile)
                } else {
                    let bytes = (n * cols) as u32 * eb + OVERREAD_BYTES;
                    let st = self.prog.buffer(
                        tile,
                        align8(bytes as u64) as u32,
                        Region::Any,
                        format!("stage:{name}.home_mask"),
                    );
                    let want = layout.ranges_on(tile);
                    home_copies.extend(self.gather(v, tile, cols, &want, st));
                    st
                };
                mask_staging.insert(tile, buf);
            }
        }
        if !home_copies.is_empty() {
            self.prog.steps.push(Step::Exchange {
                name: format!("{name}.homes"),
                copies: home_copies,
            });
        }
        let mut prep: BTreeMap<u32, Vec<SupOp>> = BTreeMap::new();
        let (homes, mask_home) = {
            let prog = &mut self.prog;
            let mut alloc = |tile: u32, bytes: u32, name: String, exact: bool| {
                if exact {
                    prog.buffer(tile, bytes, Region::Any, name)
                } else {
                    prog.buffer(
                        tile,
                        align8(bytes as u64) as u32 + OVERREAD_BYTES,
                        Region::Any,
                        name,
                    )
                }
            };
            prep_ops(name, fp, &staging, &mask_staging, &mut alloc, &mut prep)
        };
        if !prep.is_empty() {
            for ops in prep.values_mut() {
                if ops.last() != Some(&SupOp::WaitW) {
                    ops.push(SupOp::WaitW);
                }
            }
            let estimated_cycles = prep.values().map(|o| estimate(o)).max().unwrap_or(0);
            self.prog.steps.push(Step::Compute {
                name: format!("{name}.prep"),
                tiles: prep,
                estimated_cycles,
            });
        }
        (homes, mask_home)
    }

    /// Items' buffers, then per round `NAME.distribute` (q rows, kᵀ and v of the item's keys)
    /// and `NAME.scores` (`item_ops`). Returns every item's buffers.
    fn flash_scores(
        &mut self,
        name: &str,
        fp: &FlashPlan,
        homes: &[BTreeMap<u32, BufferId>; 3],
        mask_home: &BTreeMap<u32, BufferId>,
    ) -> Vec<ItemBuffers> {
        let g = fp.geo.clone();
        let amp = g.amp();
        let (kb, cols) = (amp.k as usize, amp.columns as usize);
        let ab = g.ab() as u32;
        let [q_home, kt_home, v_home] = homes;
        // Item buffers and the distribution.
        let r = g.rows as u32;
        // An item's kᵀ, v and mask buffers hold one chunk of its keys.
        let chunks = g.chunks();
        let nkp = g.chunk_keys_padded();
        let nkk = g.chunk_keys().div_ceil(kb) * kb;
        let mut bufs: Vec<ItemBuffers> = Vec::with_capacity(fp.items.len());
        let mut copies: Vec<Vec<Vec<Copy>>> = Vec::with_capacity(fp.items.len());
        // Placement groups of each key block's kᵀ and v (a new pair when a tile would hold two
        // members of one group).
        let mut kv_groups: BTreeMap<(usize, usize), (u32, u32, BTreeSet<u32>)> = BTreeMap::new();
        let (kt_first, _) = fp.kt_groups();
        let mut zero: Vec<Vec<Vec<SupOp>>> = Vec::with_capacity(fp.items.len());
        for (i, it) in fp.items.iter().enumerate() {
            let tile = it.tile;
            let pb = g.pb() as u32;
            let q = self.prog.buffer(
                tile,
                r * g.d as u32 * ab + OVERREAD_BYTES,
                Region::Any,
                format!("{name}.q"),
            );
            let kt = self.prog.buffer(
                tile,
                (nkp * g.d) as u32 * ab,
                Region::Interleaved,
                format!("{name}.kt"),
            );
            // An item whose tile holds its key block's `v` as its home reads it there: the
            // AMP's weights, in interleaved memory.
            let resident_v = fp.resident_v(i);
            let v = if resident_v {
                let v = v_home[&tile];
                self.prog.buffers[v.0 as usize].region = Region::Interleaved;
                v
            } else {
                self.prog.buffer(
                    tile,
                    (nkk * g.dv) as u32 * ab,
                    Region::Interleaved,
                    format!("{name}.v"),
                )
            };
            let key = (g.kv_of(it.batch), it.k0);
            let entry = kv_groups
                .entry(key)
                .or_insert((u32::MAX, u32::MAX, BTreeSet::new()));
            if entry.0 == u32::MAX || !entry.2.insert(tile) {
                self.next_group += 2;
                *entry = (
                    self.next_group - 2,
                    self.next_group - 1,
                    BTreeSet::from([tile]),
                );
            }
            let (gk, gvv) = (entry.0, entry.1);
            self.prog.buffers[kt.0 as usize].group = Some(gk);
            if !resident_v {
                self.prog.buffers[v.0 as usize].group = Some(gvv);
            }
            // Two items of the same query rows on the tiles of a pair (`plan::layout` puts the
            // last item of each odd run of a key block there): their `q` at one address, so
            // its copies merge into one multicast the pair receives at once.
            if let Some(prev) = i.checked_sub(1).map(|j| &fp.items[j])
                && (prev.batch, prev.q0) == (it.batch, it.q0)
                && prev.tile + 1 == tile
                && tile % 2 == 1
            {
                let qg = self.next_group;
                self.next_group += 1;
                self.prog.buffers[bufs[i - 1].q.0 as usize].group = Some(qg);
                self.prog.buffers[q.0 as usize].group = Some(qg);
            }
            let sub = g.sub_keys().div_ceil(cols) * cols;
            let s = self.prog.buffer(
                tile,
                r * sub as u32 * pb + OVERREAD_BYTES,
                Region::Any,
                format!("{name}.s"),
            );
            let p = if g.p_in_place() {
                s
            } else {
                self.prog.buffer(
                    tile,
                    r * (sub.div_ceil(kb) * kb) as u32 * ab + OVERREAD_BYTES,
                    Region::Any,
                    format!("{name}.p"),
                )
            };
            let t = self.prog.buffer(
                tile,
                r * GRB + OVERREAD_BYTES,
                Region::Any,
                format!("{name}.t"),
            );
            let part = self.prog.buffer(
                tile,
                (g.gv() as u32 + 1) * r * GRB + OVERREAD_BYTES,
                Region::Any,
                format!("{name}.partial"),
            );
            let mr = g.mask_rows();
            let mask_bytes = (mr * nkp) as u32 * pb;
            let mask = g.mask.as_ref().map(|_| {
                self.prog.buffer(
                    tile,
                    mask_bytes + OVERREAD_BYTES,
                    Region::Any,
                    format!("{name}.mask"),
                )
            });
            let alpha = g.factor_run().then(|| {
                self.prog.buffer(
                    tile,
                    r * 8 + OVERREAD_BYTES,
                    Region::Any,
                    format!("{name}.alpha"),
                )
            });
            bufs.push(ItemBuffers {
                q,
                kt,
                v,
                s,
                p,
                t,
                part,
                mask,
                alpha,
            });
            // The positions `start..end` of operand `x` from their homes to `dst`, both stored
            // as `[groups][positions][width]` (`dst_positions` positions from `start`).
            let grouped_runs =
                |copies: &mut Vec<Copy>,
                 x: usize,
                 (start, end): (usize, usize),
                 home: &BTreeMap<u32, BufferId>,
                 dst: BufferId,
                 (groups, width, dst_positions): (usize, usize, usize)| {
                    let entry = if x == 0 { it.batch } else { g.kv_of(it.batch) };
                    for (hi, pos, run) in fp.home_runs(x, entry, start, end) {
                        let h = fp.homes[x][hi];
                        let n = fp.home_positions[x][&h.tile];
                        for dg in 0..groups {
                            copies.push(Copy {
                                src: home[&h.tile],
                                src_offset: ((dg * n + h.local + pos - h.s0) * width) as u32 * ab,
                                dst,
                                dst_offset: ((dg * dst_positions + pos - start) * width) as u32
                                    * ab,
                                bytes: (run * width) as u32 * ab,
                            });
                        }
                    }
                };
            let (rows, keys) = (fp.valid_rows(i), fp.valid_keys(i));
            let mut item_copies = Vec::with_capacity(chunks.len());
            let mut item_zero = Vec::with_capacity(chunks.len());
            for (c, &(c0, clen)) in chunks.iter().enumerate() {
                let mut cc = Vec::new();
                // q rows (with the first chunk), the chunk's kᵀ groups and v rows, from their
                // homes.
                if c == 0 {
                    let q_runs = (it.q0, it.q0 + rows);
                    grouped_runs(&mut cc, 0, q_runs, q_home, q, (g.d / kb, kb, g.rows));
                }
                let (k0, k1) = (it.k0 + c0, it.k0 + (c0 + clen).min(keys));
                if k1 > k0 {
                    for (hi, pos, run) in fp.home_runs(1, g.kv_of(it.batch), k0, k1) {
                        let h = fp.homes[1][hi];
                        let g0 = kt_first[hi] + (pos - h.s0) / cols;
                        cc.push(Copy {
                            src: kt_home[&h.tile],
                            src_offset: (g0 * g.d * cols) as u32 * ab,
                            dst: kt,
                            dst_offset: ((pos - k0) / cols * g.d * cols) as u32 * ab,
                            bytes: (run.div_ceil(cols) * g.d * cols) as u32 * ab,
                        });
                    }
                    if !resident_v {
                        grouped_runs(&mut cc, 2, (k0, k1), v_home, v, (g.dv / cols, cols, nkk));
                    }
                }
                // The mask's rows (or its one row) of each of the chunk's key groups.
                if let (Some(mb), Some(m)) = (mask, &g.mask) {
                    let e = m.entry_of(it.batch);
                    let (p0, p1) = if mr == 1 {
                        (0, 1)
                    } else {
                        (it.q0, it.q0 + rows)
                    };
                    for j in 0..k1.saturating_sub(k0).div_ceil(cols) {
                        let hb = e * g.key_groups() + k0 / cols + j;
                        for (hi, pos, run) in fp.mask_runs(hb, p0, p1) {
                            let h = fp.mask_homes[hi];
                            cc.push(Copy {
                                src: mask_home[&h.tile],
                                src_offset: (h.local + pos - h.s0) as u32 * GRB,
                                dst: mb,
                                dst_offset: (j * mr + pos - p0) as u32 * GRB,
                                bytes: run as u32 * GRB,
                            });
                        }
                    }
                }
                let mut ops = Vec::new();
                if let Some(mb) = mask {
                    self.zero_gaps(mb, mask_bytes, &cc, &mut ops);
                }
                if !resident_v {
                    self.zero_gaps(v, (nkk * g.dv) as u32 * ab, &cc, &mut ops);
                }
                if !ops.is_empty() {
                    ops.push(SupOp::WaitW);
                }
                item_zero.push(ops);
                item_copies.push(cc);
            }
            zero.push(item_zero);
            copies.push(item_copies);
        }
        // Rounds: item `i` runs in round `i / tiles` (one item per tile per round), each with a
        // distribution and a scores step per chunk of its keys.
        let per_round = self.prog.tiles_used.max(1) as usize;
        let rounds = fp.items.len().div_ceil(per_round);
        for round in 0..rounds {
            let (i0, i1) = (
                round * per_round,
                ((round + 1) * per_round).min(fp.items.len()),
            );
            for c in 0..chunks.len() {
                let mut suffix = if rounds == 1 {
                    String::new()
                } else {
                    format!(".r{round}")
                };
                if chunks.len() > 1 {
                    suffix += &format!(".c{c}");
                }
                self.prog.steps.push(Step::Exchange {
                    name: format!("{name}.distribute{suffix}"),
                    copies: copies[i0..i1]
                        .iter_mut()
                        .flat_map(|cs| std::mem::take(&mut cs[c]))
                        .collect(),
                });
                // Items are independent: their programs are built in parallel.
                let tiles: BTreeMap<u32, Vec<SupOp>> = (i0..i1)
                    .into_par_iter()
                    .map(|i| {
                        let mut ops = zero[i][c].clone();
                        ops.extend(item_ops(fp, i, &bufs[i], c));
                        (fp.items[i].tile, ops)
                    })
                    .collect::<Vec<_>>()
                    .into_iter()
                    .collect();
                let estimated_cycles = tiles
                    .par_iter()
                    .map(|(_, o)| estimate(o))
                    .max()
                    .unwrap_or(0);
                self.prog.steps.push(Step::Compute {
                    name: format!("{name}.scores{suffix}"),
                    tiles,
                    estimated_cycles,
                });
            }
        }
        bufs
    }

    /// `NAME.merge` (exchange of the other items' partial results) and `NAME.merge` (compute:
    /// `flash_combine` into the output's layout).
    fn flash_merge(&mut self, name: &str, fp: &FlashPlan, out: DevValueId, bufs: &[ItemBuffers]) {
        let g = fp.geo.clone();
        let r = g.rows as u32;
        // Merge.
        let gv = g.gv() as u32;
        let mut copies = Vec::new();
        let mut tiles: BTreeMap<u32, Vec<SupOp>> = BTreeMap::new();
        for c in &fp.combiners {
            let own = fp.items[c.own];
            let tile = own.tile;
            let rows = (c.r1 - c.r0) as u32;
            let others = c.sources.len() as u32 - 1;
            let stage = if others > 0 {
                Some(self.prog.buffer(
                    tile,
                    others * (gv + 1) * rows * GRB + OVERREAD_BYTES,
                    Region::Any,
                    format!("stage:{name}.merge"),
                ))
            } else {
                None
            };
            let mut sources: Vec<Source> = Vec::new();
            let mut slot = 0u32;
            // The own partial first, then the others in key order, each a run of the stage.
            let order =
                std::iter::once(c.own).chain(c.sources.iter().copied().filter(|&s| s != c.own));
            for s in order {
                if s == c.own {
                    let part = bufs[s].part;
                    sources.push((
                        part,
                        c.r0 as u32 * GRB,
                        r * GRB,
                        (gv * r + c.r0 as u32) * GRB,
                    ));
                } else {
                    let st = stage.expect("a stage for other sources");
                    for grp in 0..=gv {
                        copies.push(Copy {
                            src: bufs[s].part,
                            src_offset: (grp * r + c.r0 as u32) * GRB,
                            dst: st,
                            dst_offset: ((slot * (gv + 1) + grp) * rows) * GRB,
                            bytes: rows * GRB,
                        });
                    }
                    let base = slot * (gv + 1) * rows * GRB;
                    sources.push((st, base, rows * GRB, base + gv * rows * GRB));
                    slot += 1;
                }
            }
            let out_buf = self.value_buffer(out, tile);
            let scratch = self.prog.buffer(
                tile,
                WORKERS * combine_scratch_bytes(&g, c.sources.len()) + OVERREAD_BYTES,
                Region::Any,
                format!("{name}.scratch"),
            );
            let out_at = (c.out_local * g.out.bytes()) as u32;
            tiles
                .entry(tile)
                .or_default()
                .extend(merge_ops(&g, rows, &sources, out_buf, out_at, scratch));
        }
        if !copies.is_empty() {
            self.prog.steps.push(Step::Exchange {
                name: format!("{name}.merge"),
                copies,
            });
        }
        let estimated_cycles = tiles.values().map(|o| estimate(o)).max().unwrap_or(0);
        self.prog.steps.push(Step::Compute {
            name: format!("{name}.merge"),
            tiles,
            estimated_cycles,
        });
    }
}
