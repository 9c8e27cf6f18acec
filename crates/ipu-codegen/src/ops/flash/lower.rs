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

use super::homes::prep_ops;
use super::layout::FlashPlan;
use super::programs::{GRB, ItemBuffers, Source, combine_scratch_bytes, item_ops, merge_ops};
use crate::cost::estimate;
use crate::error::CodegenError;
use crate::lower::*;
use crate::operator_plan::{DevOp, DevValue, DevValueId, FamilyOp};
use crate::program::*;
use ipu_kernels::OVERREAD_BYTES;
use ipu_kernels::state::*;

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
                tiles: prep.into(),
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
                    tiles: tiles.into(),
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
            tiles: tiles.into(),
            estimated_cycles,
        });
    }
}
