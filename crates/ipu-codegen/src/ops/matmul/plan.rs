//! The planning of a matmul: its candidates ranked, the finalists kept, the chosen mapping's
//! blocks dealt to the tiles, the output's layout, and for a 3-D split the reduction of its
//! partials.

use ipu_graph::{DType, Operation, Value};
use ipu_package::split_shape;
use ipu_target::AmpMode;

use super::blocks::{MatMul, deal_blocks, output_layout};
use super::candidates::{
    Candidate, MATMUL_CANDIDATES_MAX, MatmulShape, Misses, Room, k_split_candidates,
    split_candidates,
};
use super::cost::{
    EXECUTABLE_RESERVE_BYTES, OperandHomes, SUPERVISOR_BYTES_PER_ROUND, amp_rounds_max,
};
use crate::error::{CodegenError, MemoryRegion};
use crate::layout::Layout;
use crate::operator_plan::{DevOp, DevOpKind, DevValueId, Finalist};
use crate::ops::elementwise::Elementwise;
use crate::ops::unsupported;
use crate::plan::{FINALISTS, Planner, matmul_mode};

impl Planner<'_> {
    /// A graph matmul: FP8 operands are cast to f16 first (the Mk2 AMP has no FP8 mode), the
    /// product is planned, and partials of another type than the output are cast.
    pub(crate) fn plan_matmul_op(
        &mut self,
        op: &Operation,
        ins: &[DevValueId],
        out_val: &Value,
        partials: &DType,
        out_dtype: &DType,
    ) -> Result<(), CodegenError> {
        let out = op.outputs[0];
        // Blocks index each operand's batch as the output's, or as batch 0 of an unbatched
        // operand: batch axes broadcast on both sides have no such index.
        let batch = |v: DevValueId| split_shape(&self.values[v].shape).0;
        let out_batch = split_shape(&out_val.ty.shape).0;
        for (&x, side) in ins.iter().zip(["left", "right"]) {
            if batch(x) != 1 && batch(x) != out_batch {
                return unsupported(
                    op,
                    &format!(
                        "the {side} operand {:?} broadcasts only some batch axes of {:?}; \
                         expand it to the output's batch first",
                        self.values[x].shape, out_val.ty.shape
                    ),
                );
            }
        }
        let mut a = ins[0];
        let mut b = ins[1];
        let in_dtype = self.values[a].dtype;
        let Some(mode) = matmul_mode(in_dtype, *partials) else {
            return unsupported(op, "partials must be f32, or f16 for f16 and FP8 operands");
        };
        // FP8 operands: the Mk2 AMP has no FP8 mode; cast to f16 first (on every
        // target for now).
        if in_dtype.is_fp8() || self.values[b].dtype.is_fp8() {
            a = self.cast_to(a, DType::F16, &format!("{}.a_f16", op.name));
            b = self.cast_to(b, DType::F16, &format!("{}.b_f16", op.name));
        }
        let partials_dtype = *partials;
        let c = self.plan_matmul(
            &op.name,
            mode,
            a,
            b,
            partials_dtype,
            &out_val.ty.shape,
            true,
        )?;
        if partials_dtype == *out_dtype {
            self.rename(c, out_val.name.clone(), out);
        } else {
            let layout = self.values[c].layout.clone();
            let r = self.add_graph_value(out, out_val, *out_dtype, layout);
            self.push_simple(format!("{}.cast", op.name), Elementwise::Cast, vec![c], r);
        }
        Ok(())
    }

    /// Enumerates `(pm, pn)` splits of rows and column groups (and batch), and with `k_split`
    /// also 3-D splits (k chunks on separate tiles, their partials summed afterwards), costs
    /// each, keeps the cheapest that fits. `k_split` is for graph matmuls only: the
    /// reference's device precision of a 3-D split is told the split by the build's
    /// [`crate::BuildReport::k_splits`], keyed by the graph operation.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn plan_matmul(
        &mut self,
        name: &str,
        mode: AmpMode,
        a: DevValueId,
        b: DevValueId,
        partials: DType,
        out_shape: &[usize],
        k_split: bool,
    ) -> Result<DevValueId, CodegenError> {
        if !self.target.supports_amp(mode) {
            return Err(CodegenError::unsupported(
                self.origin.clone(),
                format!(
                    "its matmul needs AMP mode {mode:?}, which {} lacks",
                    self.target.kind
                ),
            ));
        }
        let cols = mode.geometry().columns as usize;
        let (batch, m, n) = split_shape(out_shape);
        let groups = n.div_ceil(cols);
        let tiles = self.tiles as usize;
        let shape = MatmulShape {
            mode,
            batch,
            m,
            k: *self.values[a].shape.last().unwrap_or(&1),
            n,
            tiles,
            rounds_max: amp_rounds_max(self.target),
            homes: self.operand_homes([a, b], batch),
            foldable: split_shape(&self.values[b].shape).0 == 1,
        };
        let room = Room {
            memory: self.target.memory_bytes() as u64,
            interleaved: self.target.interleaved_bytes() as u64,
            reserve: self.support_reserve_bytes,
            // What other live values hold on the busiest tile meanwhile.
            other_live: self.other_live_bytes(),
            budget: self.budget(),
        };
        let candidates = self.matmul_candidates(&shape, &room, k_split)?;
        for c in candidates.iter().take(FINALISTS) {
            self.finalists.push(Finalist {
                op: name.to_string(),
                mapping: c.mapping(mode),
                estimated_cycles: c.cycles,
                estimated_exchange_cycles: c.exchange_cycles,
                peak_tile_bytes: c.tile_bytes,
                tiles: c.tiles_used(batch, tiles) as u32,
                alternatives: candidates.len(),
            });
        }
        let chosen = candidates[self.chosen(name, candidates.len().min(FINALISTS))];
        let Candidate {
            pm,
            pn,
            k_chunks,
            k_splits,
            consecutive,
            folded,
            ..
        } = chosen;
        if k_chunks > 1 {
            self.spread_chunk_homes(mode, [a, b], k_chunks);
        }
        let blocks = if folded {
            deal_blocks(1, (batch * m, groups), (pm, pn, 1), consecutive, tiles)
        } else {
            deal_blocks(batch, (m, groups), (pm, pn, k_splits), consecutive, tiles)
        };
        let layout = output_layout(&blocks, batch, (m, groups), cols, folded.then_some(m));
        let mut shape = out_shape.to_vec();
        if k_splits > 1 {
            shape.insert(0, k_splits);
        }
        let c = self.add_value(
            if k_splits > 1 {
                format!("{name}.split_partials")
            } else {
                format!("{name}.partials")
            },
            partials,
            shape,
            None,
            layout,
        );
        let reduction = (k_splits > 1).then(|| {
            let split = (pm, pn, k_splits);
            self.plan_reduction(mode, &blocks, split, batch, (m, groups), out_shape)
        });
        // The product's estimate is the candidate's less its reduction, which the reduction's
        // stages carry.
        let (reduce_cycles, reduce_exchange) = reduction.as_ref().map_or((0, 0), |r| r.cycles());
        self.ops.push(DevOp {
            origin: self.origin.clone(),
            name: name.to_string(),
            kind: DevOpKind::new(MatMul {
                mode,
                blocks,
                pm,
                pn,
                k_chunks,
                k_splits,
                consecutive,
                folded,
            }),
            inputs: vec![a, b],
            output: c,
            estimated_cycles: chosen.cycles - reduce_cycles,
            estimated_exchange_cycles: chosen.exchange_cycles - reduce_exchange,
        });
        Ok(match reduction {
            Some(r) => self.push_reduction(name, (c, partials), out_shape, &r),
            None => c,
        })
    }

    /// Where a matmul's operands `[a, b]` are, for the cost of staging them: the most bytes of
    /// each on one tile, and how many of the output's `batch` entries read each element (all
    /// of them for an unbatched operand).
    fn operand_homes(&self, [a, b]: [DevValueId; 2], batch: usize) -> OperandHomes {
        let held = |v: DevValueId| {
            let val = &self.values[v];
            (val.layout.most_elements_on_a_tile() * val.dtype.bytes()) as u64
        };
        let fanout = |v: DevValueId| {
            if split_shape(&self.values[v].shape).0 == 1 {
                batch as u64
            } else {
                1
            }
        };
        OperandHomes {
            a: held(a),
            a_fanout: fanout(a),
            b: held(b),
            b_fanout: fanout(b),
        }
    }

    /// The candidates of a matmul of `shape` in `room`, ranked ([`Candidate::rank`]): its 2-D
    /// splits and, with `k_split`, its 3-D ones (none once the search is spent and one is
    /// found); refused with the figures of the closest split when none fits.
    fn matmul_candidates(
        &mut self,
        shape: &MatmulShape,
        room: &Room,
        k_split: bool,
    ) -> Result<Vec<Candidate>, CodegenError> {
        let sync_cycles = self.target.sync_cycles as u64;
        let (mut candidates, mut misses) =
            split_candidates(shape, room, sync_cycles, &mut self.search);
        if let Some(folded) = shape.folded() {
            // The batch folded into the rows: blocks of rows across batch entries.
            let (more, more_misses) =
                split_candidates(&folded, room, sync_cycles, &mut self.search);
            candidates.extend(more.into_iter().map(|c| Candidate { folded: true, ..c }));
            misses.merge(&more_misses);
        }
        if k_split {
            let found = k_split_candidates(
                shape,
                room.tile_bytes_max(),
                room.interleaved,
                sync_cycles,
                MATMUL_CANDIDATES_MAX,
            );
            for e in found {
                if self.search.spend() && !candidates.is_empty() {
                    break;
                }
                candidates.push(Candidate {
                    cycles: e.cycles,
                    exchange_cycles: e.exchange_cycles,
                    tile_bytes: e.tile_bytes,
                    pm: e.pm,
                    pn: e.pn,
                    k_chunks: 1,
                    k_splits: e.splits,
                    consecutive: e.consecutive,
                    folded: false,
                });
            }
        }
        if candidates.is_empty() {
            return Err(self.matmul_refusal(shape, room, &misses));
        }
        candidates.sort_by_key(Candidate::rank);
        Ok(candidates)
    }

    /// The refusal of a matmul with no split that fits: the split that comes closest to
    /// fitting memory, and by how much it misses; else the one whose supervisor program comes
    /// closest to fitting executable memory.
    fn matmul_refusal(&self, shape: &MatmulShape, room: &Room, misses: &Misses) -> CodegenError {
        let (tiles, rounds_max) = (shape.tiles, shape.rounds_max);
        let Room {
            reserve,
            other_live,
            interleaved,
            ..
        } = *room;
        let available = room
            .memory
            .saturating_sub(reserve)
            .saturating_sub(other_live);
        match (misses.closest, misses.fewest_rounds) {
            (Some(c), _) if c.over_total >= c.over_interleaved => {
                let (pm, pn) = (c.pm, c.pn);
                self.does_not_fit(
                    MemoryRegion::Any,
                    c.tile_bytes,
                    available,
                    format!(
                        "its matmul has no tile mapping that fits on {tiles} tiles; the closest \
                         split (rows/{pm} x column-groups/{pn}) is counted, with \
                         {reserve} bytes reserved per tile and {other_live} \
                         held by other live values"
                    ),
                )
            }
            (Some(c), _) => {
                let (pm, pn) = (c.pm, c.pn);
                self.does_not_fit(
                    MemoryRegion::Interleaved,
                    interleaved + c.over_interleaved,
                    interleaved,
                    format!(
                        "its matmul has no tile mapping that fits on {tiles} tiles; the weights of \
                         the closest split (rows/{pm} x column-groups/{pn}) are counted"
                    ),
                )
            }
            (None, Some(r)) => {
                let (rounds, pm, pn) = (r.rounds, r.pm, r.pn);
                let executable = (self.target.executable_end - self.target.executable_base) as u64;
                self.does_not_fit(
                    MemoryRegion::Executable,
                    rounds * SUPERVISOR_BYTES_PER_ROUND + EXECUTABLE_RESERVE_BYTES,
                    executable,
                    format!(
                        "its matmul has no tile mapping whose supervisor program fits on \
                         {tiles} tiles; the split with the fewest AMP rounds a tile \
                         (rows/{pm} x column-groups/{pn}: {rounds} rounds of \
                         {SUPERVISOR_BYTES_PER_ROUND} bytes, {rounds_max} at most) is \
                         counted, with {EXECUTABLE_RESERVE_BYTES} bytes kept for kernels"
                    ),
                )
            }
            (None, None) => CodegenError::unsupported(
                self.origin.clone(),
                format!(
                    "its matmul: {} tile mappings examined, none usable",
                    misses.examined
                ),
            ),
        }
    }

    /// Serial k chunks stage one k range at a time: an operand only this matmul reads (a graph
    /// input or constant) is laid out so that every tile holds its share of every chunk, and
    /// all tiles send in every chunk's exchange (in storage order a chunk would sit on a
    /// `1 / chunks` share of the tiles, which would then send all they hold to every block).
    fn spread_chunk_homes(&mut self, mode: AmpMode, [a, b]: [DevValueId; 2], chunks: usize) {
        let geo = mode.geometry();
        let (kblk, cols) = (geo.k as usize, geo.columns as usize);
        let tiles = self.tiles;
        for (x, group) in [(a, kblk), (b, cols)] {
            if !self.read_only_here(x, &[a, b], true) || self.values[x].layout.group != group {
                continue;
            }
            let shape = self.values[x].shape.clone();
            let (batch, rows, width) = split_shape(&shape);
            let parts: Vec<Vec<(usize, usize)>> = if x == a {
                // [batch][kb][m][kblk]: a chunk is a run of K blocks of every batch entry.
                let (m, kb) = (rows, width.div_ceil(kblk));
                let per = kb * m * kblk;
                (0..chunks)
                    .map(|c| {
                        let (kb0, kb1) = (kb * c / chunks, kb * (c + 1) / chunks);
                        (0..batch)
                            .map(|bi| (bi * per + kb0 * m * kblk, bi * per + kb1 * m * kblk))
                            .collect()
                    })
                    .collect()
            } else {
                // [batch][groups][k][cols]: a chunk is a run of rows of every column group.
                let (k, groups) = (rows, width.div_ceil(cols));
                let kb = k.div_ceil(kblk);
                (0..chunks)
                    .map(|c| {
                        let k_lo = (kb * c / chunks * kblk).min(k);
                        let k_hi = (kb * (c + 1) / chunks * kblk).min(k);
                        (0..batch * groups)
                            .map(|bg| (bg * k * cols + k_lo * cols, bg * k * cols + k_hi * cols))
                            .collect()
                    })
                    .collect()
            };
            self.values[x].layout = Layout::spread_parts(group, &parts, tiles);
        }
    }
}
