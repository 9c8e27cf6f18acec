//! The lowering of a matmul's blocks: each block stages its rows of `a` and its weight
//! blocks of `b` (the shared operand of a run of consecutive tiles in a placement group, so
//! one multicast sends it) and runs its AMP rounds with ping-pong partials, as one chain when
//! every worker has two rows or more; serial k chunks each have their own exchange and
//! compute steps.

use std::collections::{BTreeMap, BTreeSet};

use ipu_package::split_shape;
use ipu_target::AmpMode;

use super::blocks::{Block, Consecutive, MatMul};
use crate::cost::estimate;
use crate::error::CodegenError;
use crate::layout::moves;
use crate::lower::*;
use crate::operator_plan::{DevOp, DevValue, FamilyOp};
use crate::program::*;
use ipu_kernels::OVERREAD_BYTES;

/// The weights a block stages: (batch, first and last column group, k split); or, for the rows
/// of `a` it stages, (batch, first and last row, k split).
type WeightKey = (usize, usize, usize, usize);

impl FamilyOp for MatMul {
    fn lower(&self, lowerer: &mut Lowerer<'_>, index: usize) -> Result<(), CodegenError> {
        lowerer.lower_steps(index, |l, steps| l.lower_matmul(index, self, steps))
    }

    fn k_splits(&self) -> usize {
        self.k_splits
    }

    fn macs(&self, op: &DevOp, values: &[DevValue]) -> Option<(u64, AmpMode)> {
        let (a, c) = (&values[op.inputs[0]], &values[op.output]);
        let k = *a.shape.last().unwrap_or(&1) as u64;
        // A k split's output holds a slice of partials per split, each over its share of k.
        let macs = c.shape.iter().product::<usize>() as u64 / self.k_splits as u64 * k;
        Some((macs, self.mode))
    }
}

impl Lowerer<'_> {
    /// Puts `stage`, a staging buffer of the blocks staging `key`, in their placement group:
    /// the group of its kind, or a new one for the first of its kind or a second block of it
    /// on one tile.
    fn join_group(
        &mut self,
        groups: &mut BTreeMap<WeightKey, (u32, BTreeSet<u32>)>,
        key: WeightKey,
        stage: BufferId,
    ) {
        let tile = self.prog.buffers[stage.0 as usize].tile;
        let entry = groups.entry(key).or_insert((u32::MAX, BTreeSet::new()));
        if entry.0 == u32::MAX || !entry.1.insert(tile) {
            *entry = (self.next_group, BTreeSet::from([tile]));
            self.next_group += 1;
        }
        self.prog.buffers[stage.0 as usize].group = Some(entry.0);
    }

    pub(crate) fn lower_matmul(
        &mut self,
        index: usize,
        mm: &MatMul,
        steps: &mut OpSteps,
    ) -> Result<(), CodegenError> {
        let (mode, blocks, consecutive) = (mm.mode, &mm.blocks[..], mm.consecutive);
        let (k_chunks, k_splits) = (mm.k_chunks, mm.k_splits);
        let op = &self.plan.ops[index];
        let name = op.name.clone();
        let (a, b, c) = (op.inputs[0], op.inputs[1], op.output);
        let geo = mode.geometry();
        let (kblk, cols) = (geo.k as usize, geo.columns as usize);
        let (a_batch, m, k) = split_shape(&self.plan.values[a].shape);
        let (b_batch, _, n) = split_shape(&self.plan.values[b].shape);
        let groups = n.div_ceil(cols);
        let kb = k.div_ceil(kblk);
        let c_layout = self.plan.values[c].layout.clone();
        // A k split's partials: slice `split` of `[k_splits, ..]`.
        let (out_batch, _, _) = split_shape(&self.plan.values[c].shape[(k_splits > 1) as usize..]);
        let slice = out_batch * groups * m * cols;
        let row_bytes = geo.k * geo.input_bytes; // 32 for every mode
        let out_row_bytes = geo.columns * geo.partial_bytes; // 32 for every mode
        let weight_bytes = geo.weight_bytes();
        // A folded block's rows run over the batch entries' rows of `m` each.
        let folded = mm.folded.then_some(m);
        // Per block: its output buffer, the ping-pong partner (both live across the chunks;
        // a chained block accumulates in place, its output buffer its own partner) and the
        // output offset of each of its column groups.
        let mut outputs = Vec::with_capacity(blocks.len());
        for bl in blocks {
            let c_buf = self.value_buffer(c, bl.tile);
            let c_bytes = self.prog.buffers[c_buf.0 as usize].bytes;
            let t_buf = if amp_chains((bl.m1 - bl.m0) as u32) {
                c_buf
            } else {
                self.prog
                    .buffer(bl.tile, c_bytes, Region::Any, format!("pingpong:{name}"))
            };
            let mut offsets = Vec::new();
            // A block's rows of a column group are one run on its tile (a folded block's
            // runs within batch entries back to back): the first one's place is the run's.
            let (b0, r0, _) = bl.segments(folded)[0];
            for g in bl.g0..bl.g1 {
                let start = bl.split * slice + b0 * groups * m * cols + (g * m + r0) * cols;
                // Pieces are sorted by start.
                let at = c_layout.pieces.partition_point(|p| p.start < start);
                let piece = (c_layout.pieces.get(at))
                    .filter(|p| p.start == start && p.tile == bl.tile)
                    .ok_or_else(|| {
                        CodegenError::internal(format!("{name}: no output piece at {start}"))
                    })?;
                offsets.push(piece.local as u32 * geo.partial_bytes);
            }
            outputs.push((c_buf, t_buf, offsets));
        }
        let chunks = k_chunks.clamp(1, kb);
        let k_splits = k_splits.clamp(1, kb);
        // The K blocks of a chunk (serial chunks carry the accumulation, so the block's first
        // round is K block 0 and its last `kb - 1`), or of a block's k split (its own partials
        // from zero): (first, end, first of the accumulation, last of it).
        let k_range = |split: usize, chunk: usize| {
            if k_splits > 1 {
                let (s0, s1) = (kb * split / k_splits, kb * (split + 1) / k_splits);
                (s0, s1, s0, s1 - 1)
            } else {
                (kb * chunk / chunks, kb * (chunk + 1) / chunks, 0, kb - 1)
            }
        };
        let b_base = |bl: &Block| {
            if b_batch == 1 {
                0
            } else {
                bl.batch * groups * k * cols
            }
        };
        // The weights of a block's K blocks `kb0..kb1`, staged group by group
        // (`[bg][kc][kblk][cols]`: each group's rows are one run of `b`'s storage), or, with
        // `k_major`, K block by K block (`[kc][bg][kblk][cols]`: one run when `b` is held as a
        // tied table's lookup holds it, a piece a K block of a group, consecutive groups side
        // by side). The AMP reads one K block of a group a round either way.
        let b_want = |bl: &Block, (kb0, kb1): (usize, usize), k_major: bool| {
            let (bg, kcp) = (bl.g1 - bl.g0, (kb1 - kb0) * kblk);
            let (k_lo, k_hi) = (kb0 * kblk, (kb1 * kblk).min(k));
            let mut want = Vec::new();
            if k_major {
                for kk in kb0..kb1 {
                    let rows = kblk.min(k - kk * kblk);
                    for g in bl.g0..bl.g1 {
                        let s = b_base(bl) + g * k * cols + kk * kblk * cols;
                        let at = ((kk - kb0) * bg + (g - bl.g0)) * kblk * cols;
                        want.push((s, s + rows * cols, at));
                    }
                }
            } else {
                for g in bl.g0..bl.g1 {
                    let s = b_base(bl) + g * k * cols + k_lo * cols;
                    want.push((s, s + (k_hi - k_lo) * cols, (g - bl.g0) * kcp * cols));
                }
            }
            want
        };
        // K-major staging where it takes fewer copies over the first chunk's blocks.
        let k_major = {
            let b_val = &self.plan.values[b];
            let copies = |k_major: bool| -> usize {
                (blocks.iter())
                    .map(|bl| {
                        let (kb0, kb1, _, _) = k_range(bl.split, 0);
                        let want = b_want(bl, (kb0, kb1), k_major);
                        moves(&b_val.shape, &b_val.layout, cols, &want).len()
                    })
                    .sum()
            };
            copies(true) < copies(false)
        };
        // Every chunk of a block stages into the same buffers (its largest chunk's bytes), so
        // the rounds of two chunks of the same shape have the same vertex states and their
        // chains are stored once.
        let mut weight_groups: BTreeMap<WeightKey, (u32, BTreeSet<u32>)> = BTreeMap::new();
        // With `Rows`, the blocks sharing rows of `a` stage them at one address alike.
        let mut row_groups: BTreeMap<WeightKey, (u32, BTreeSet<u32>)> = BTreeMap::new();
        let mut stages = Vec::with_capacity(blocks.len());
        for bl in blocks {
            let kc = (0..chunks)
                .map(|ch| {
                    let (kb0, kb1, _, _) = k_range(bl.split, ch);
                    kb1 - kb0
                })
                .max()
                .unwrap_or(0);
            let (bm, bg) = (bl.m1 - bl.m0, bl.g1 - bl.g0);
            // A staging: [kc][bm][kblk].
            let a_bytes = (kc * bm) as u32 * row_bytes;
            let a_st = self.prog.buffer(
                bl.tile,
                a_bytes + OVERREAD_BYTES,
                Region::Any,
                format!("stage:{name}.a"),
            );
            // An operand without a batch is staged alike for every batch entry.
            let entry = |operand_batch: usize| if operand_batch == 1 { 0 } else { bl.batch };
            if consecutive == Consecutive::Rows {
                let key = (entry(a_batch), bl.m0, bl.m1, bl.split);
                self.join_group(&mut row_groups, key, a_st);
            }
            // B staging (weights): [bg][kcp][cols], or [kc][bg][kblk][cols] with `k_major`, in
            // interleaved memory.
            let b_bytes = (bg * kc * kblk * cols) as u32 * geo.input_bytes;
            let b_st = self.prog.buffer(
                bl.tile,
                b_bytes,
                Region::Interleaved,
                format!("stage:{name}.w"),
            );
            // Blocks with the same weights hold them at the same address (a placement
            // group), so the exchange can multicast them.
            let key = (entry(b_batch), bl.g0, bl.g1, bl.split);
            self.join_group(&mut weight_groups, key, b_st);
            stages.push((a_st, b_st));
        }
        for chunk in 0..chunks {
            let mut step_copies: Vec<Copy> = Vec::new();
            let mut step_tiles: BTreeMap<u32, Vec<SupOp>> = BTreeMap::new();
            for ((bl, (c_buf, t_buf, offsets)), &(a_st, b_st)) in
                blocks.iter().zip(&outputs).zip(&stages)
            {
                let (c_buf, t_buf) = (*c_buf, *t_buf);
                let (kb0, kb1, first, last) = k_range(bl.split, chunk);
                let kc = kb1 - kb0;
                let kcp = kc * kblk;
                let bm = bl.m1 - bl.m0;
                let bg = bl.g1 - bl.g0;
                let a_bytes = (kc * bm) as u32 * row_bytes;
                let a_base = |b: usize| if a_batch == 1 { 0 } else { b * kb * m * kblk };
                let segments = bl.segments(folded);
                let want: Vec<_> = (kb0..kb1)
                    .flat_map(|g| {
                        // The segments' rows back to back in K block `g`'s staging.
                        let mut at = (g - kb0) * bm * kblk;
                        segments.iter().map(move |&(b, r0, r1)| {
                            let (s, len) = (a_base(b) + (g * m + r0) * kblk, (r1 - r0) * kblk);
                            at += len;
                            (s, s + len, at - len)
                        })
                    })
                    .collect();
                let mut cp = self.gather(a, bl.tile, kblk, &want, a_st);
                let b_bytes = (bg * kcp * cols) as u32 * geo.input_bytes;
                let want = b_want(bl, (kb0, kb1), k_major);
                cp.extend(self.gather(b, bl.tile, cols, &want, b_st));
                let mut ops = Vec::new();
                self.zero_gaps(a_st, a_bytes, &cp, &mut ops);
                self.zero_gaps(b_st, b_bytes, &cp, &mut ops);
                if !ops.is_empty() {
                    ops.push(SupOp::WaitW);
                }
                step_copies.extend(cp);
                // The block's rounds are one chain when every worker has two rows or more
                // (`Kernel::AmpChain`: later rounds keep the workers' registers, each stores
                // the last row the one before left in the AMP, and only the last drains).
                let chain = amp_chains(bm as u32);
                debug_assert!(
                    !chain || [row_bytes, out_row_bytes] == [AMP_CHAIN_ROW_BYTES; 2],
                    "a chain's rows are {AMP_CHAIN_ROW_BYTES} bytes"
                );
                let chain_rounds = (bl.g1 - bl.g0) * kc;
                let mut prev_out = None;
                // Whether a round of the chain so far had no partials-in (its zeros stay in
                // the workers' registers).
                let mut zeros = false;
                for (gi, g) in (bl.g0..bl.g1).enumerate() {
                    let c_off = offsets[gi];
                    for kk in kb0..kb1 {
                        let w_block = if k_major {
                            ((kk - kb0) * bg + (g - bl.g0)) * kblk
                        } else {
                            (g - bl.g0) * kcp + (kk - kb0) * kblk
                        };
                        let w_off = w_block as u32 * geo.columns * geo.input_bytes;
                        debug_assert_eq!(w_off % weight_bytes, 0);
                        ops.push(SupOp::AmpW(b_st, w_off));
                        // The last round writes the output buffer; rounds alternate before it.
                        let (dst, src) = if (last - kk) % 2 == 0 {
                            (c_buf, t_buf)
                        } else {
                            (t_buf, c_buf)
                        };
                        let a_row = ((kk - kb0) * bm) as u32 * row_bytes;
                        let partials = (kk > first).then_some((src, c_off));
                        if chain {
                            let n = gi * kc + (kk - kb0);
                            ops.push(amp_chain_launch(
                                (a_st, a_row),
                                partials,
                                (dst, c_off),
                                bm as u32,
                                (n, prev_out, zeros),
                                n + 1 == chain_rounds,
                            ));
                            zeros |= partials.is_none();
                            prev_out = Some((dst, c_off));
                        } else {
                            ops.push(amp_launch(
                                ((a_st, a_row), row_bytes),
                                partials,
                                ((dst, c_off), out_row_bytes),
                                bm as u32,
                                false,
                            ));
                        }
                        ops.push(SupOp::WaitW);
                    }
                }
                let t = step_tiles.entry(bl.tile).or_default();
                if t.is_empty() {
                    t.push(SupOp::AmpCfg(mode));
                }
                t.extend(ops);
            }
            if chunk + 1 == chunks {
                steps.copies.extend(step_copies);
                for (tile, ops) in step_tiles {
                    steps.tiles.entry(tile).or_default().extend(ops);
                }
            } else {
                // An earlier chunk: its own exchange and compute steps.
                let step_name = format!("{name}.k{chunk}");
                self.prog.steps.push(Step::Exchange {
                    name: step_name.clone(),
                    copies: step_copies,
                });
                for ops in step_tiles.values_mut() {
                    ops.push(SupOp::WaitW);
                }
                let estimated_cycles = step_tiles.values().map(|o| estimate(o)).max().unwrap_or(0);
                self.prog.steps.push(Step::Compute {
                    name: step_name,
                    tiles: step_tiles.into(),
                    estimated_cycles,
                });
            }
        }
        Ok(())
    }
}
