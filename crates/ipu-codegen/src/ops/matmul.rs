//! Matrix products on the AMP: the planner splits rows, column groups and (when the
//! operands do not fit) k into serial chunks, costs every split and keeps the finalists; the
//! lowering stages each block's rows of `a` and weight blocks of `b` and runs AMP rounds with
//! ping-pong partials.

use std::collections::{BTreeMap, BTreeSet};

use ipu_graph::{DType, Operation, Value};
use ipu_package::split_shape;
use ipu_target::{
    AMP_WEIGHT_LOAD_BYTES_PER_CYCLE, AmpMode, BARREL_SLOT_CYCLES, EXCHANGE_BYTES_PER_CYCLE,
    EXCHANGE_PHASE_OVERHEAD_CYCLES, WORKER_CONTEXTS,
};

use super::unsupported;
use crate::layout::Layout;
use crate::lower::*;
use crate::plan::*;
use crate::program::*;
use crate::{CodegenError, MemoryRegion};
use ipu_kernels::{self as kernels, OVERREAD_BYTES};

use crate::cost::estimate;

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
        let c = self.plan_matmul(&op.name, mode, a, b, partials_dtype, &out_val.ty.shape)?;
        if partials_dtype == *out_dtype {
            self.rename(c, out_val.name.clone(), out);
        } else {
            let layout = self.values[c].layout.clone();
            let r = self.add_graph_value(out, out_val, *out_dtype, layout);
            self.push_simple(format!("{}.cast", op.name), DevOpKind::Cast, vec![c], r);
        }
        Ok(())
    }

    /// Enumerates `(pm, pn)` splits of rows and column groups (and batch), costs each, keeps the
    /// cheapest that fits.
    pub(crate) fn plan_matmul(
        &mut self,
        name: &str,
        mode: AmpMode,
        a: DevValueId,
        b: DevValueId,
        partials: DType,
        out_shape: &[usize],
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
        let geo = amp_geometry(mode);
        let (batch, m, n) = ipu_package::split_shape(out_shape);
        let k = *self.values[a].shape.last().unwrap_or(&1);
        let groups = n.div_ceil(geo.cols);
        let kb = k.div_ceil(geo.k_block);
        let kp = kb * geo.k_block;
        let slot = BARREL_SLOT_CYCLES as u64;
        let mut candidates: Vec<(u64, u64, u64, usize, usize, usize)> = Vec::new();
        let mut examined = 0;
        // The candidate that misses by the least: (bytes over in total, bytes over in
        // interleaved memory, bytes per tile, pm, pn).
        let mut closest: Option<(u64, u64, u64, usize, usize)> = None;
        let tiles = self.tiles as usize;
        // What other live values hold on the busiest tile meanwhile.
        let other_live = self.other_live_bytes();
        let budget = self.budget();
        let reserve = self.support_reserve_bytes;
        'outer: for pm in 1..=m.min(tiles) {
            for pn in 1..=groups.min(tiles) {
                examined += 1;
                if examined > MATMUL_CANDIDATES_MAX {
                    break 'outer;
                }
                if self.search.spend() && !candidates.is_empty() {
                    break 'outer;
                }
                let blocks = batch * pm * pn;
                let per_tile = blocks.div_ceil(tiles) as u64;
                let bm = m.div_ceil(pm) as u64;
                let bg = groups.div_ceil(pn) as u64;
                let a_bytes = kp as u64 * bm * geo.in_bytes as u64;
                let b_bytes = bg * kp as u64 * (geo.cols * geo.in_bytes) as u64;
                let c_bytes = bg * bm * (geo.cols * geo.out_bytes) as u64;
                // Serial k chunks when memory demands: the fewest that fit (each chunk adds an
                // exchange phase and a sync, and stages only its share of the operands).
                let fits = |chunks: u64| {
                    let other = other_live;
                    let share = (kb as u64).div_ceil(chunks);
                    let (a, b) = (a_bytes / kb as u64 * share, b_bytes / kb as u64 * share);
                    let mem = per_tile * (a + b + 2 * c_bytes + 4 * kernels::OVERREAD_BYTES as u64);
                    // Once split, keep headroom for what this model does not see (support
                    // data beyond the reserve, fragmentation between live buffers).
                    let need = if chunks > 1 {
                        mem + mem / CHUNKED_HEADROOM_DIVISOR
                    } else {
                        mem
                    };
                    let over_total = (need + reserve + other)
                        .saturating_sub(self.target.memory_bytes() as u64)
                        .max(need.saturating_sub(budget.unwrap_or(u64::MAX)));
                    let over_interleaved =
                        (per_tile * b).saturating_sub(self.target.interleaved_bytes() as u64);
                    (mem, over_total, over_interleaved)
                };
                let chunks = (0..)
                    .map(|e| 1u64 << e)
                    .take_while(|&c| c <= (kb as u64).min(K_CHUNKS_MAX))
                    .find(|&c| {
                        let (_, t, i) = fits(c);
                        t == 0 && i == 0
                    })
                    .unwrap_or(1);
                let (mem, over_total, over_interleaved) = fits(chunks);
                if over_total > 0 || over_interleaved > 0 {
                    let worst = over_total.max(over_interleaved);
                    if closest.is_none_or(|c: (u64, u64, u64, usize, usize)| worst < c.0.max(c.1)) {
                        closest = Some((over_total, over_interleaved, mem, pm, pn));
                    }
                    continue;
                }
                let workers = WORKER_CONTEXTS as u64;
                let rows_per_worker = bm.div_ceil(workers) as u32;
                let weight_bytes = (geo.k_block * geo.cols * geo.in_bytes) as u64;
                let round = slot * kernels::amp_slots(rows_per_worker, true) as u64
                    + slot
                    + weight_bytes / AMP_WEIGHT_LOAD_BYTES_PER_CYCLE as u64
                    + slot * (2 + workers * 2 + 1);
                let compute = per_tile * bg * kb as u64 * round;
                let exchange = per_tile * (a_bytes + b_bytes) / EXCHANGE_BYTES_PER_CYCLE as u64
                    + chunks * (EXCHANGE_PHASE_OVERHEAD_CYCLES + self.target.sync_cycles) as u64;
                candidates.push((compute + exchange, exchange, mem, pm, pn, chunks as usize));
            }
        }
        if candidates.is_empty() {
            // Report the split that comes closest to fitting, and by how much it misses.
            let available = (self.target.memory_bytes() as u64)
                .saturating_sub(reserve)
                .saturating_sub(other_live);
            let interleaved = self.target.interleaved_bytes() as u64;
            return Err(match closest {
                Some((over_total, over_interleaved, mem, pm, pn))
                    if over_total >= over_interleaved =>
                {
                    self.does_not_fit(
                        MemoryRegion::Any,
                        mem,
                        available,
                        format!(
                            "its matmul has no tile mapping that fits on {tiles} tiles; the closest \
                             split (rows/{pm} x column-groups/{pn}) is counted, with \
                             {reserve} bytes reserved per tile and {other_live} \
                             held by other live values"
                        ),
                    )
                }
                Some((_, over_interleaved, _, pm, pn)) => self.does_not_fit(
                    MemoryRegion::Interleaved,
                    interleaved + over_interleaved,
                    interleaved,
                    format!(
                        "its matmul has no tile mapping that fits on {tiles} tiles; the weights of \
                         the closest split (rows/{pm} x column-groups/{pn}) are counted"
                    ),
                ),
                None => CodegenError::unsupported(
                    self.origin.clone(),
                    format!("its matmul: {examined} tile mappings examined, none usable"),
                ),
            });
        }
        candidates.sort_by_key(|c| (c.0, c.2, c.3, c.4));
        if tracing::enabled!(tracing::Level::DEBUG) {
            // The 3-D split's estimate beside the 2-D winner (costed only, see
            // `k_split_estimate`).
            let k_split = k_split_estimate(
                mode,
                (batch, m, k, n),
                tiles,
                (self.target.memory_bytes() as u64)
                    .saturating_sub(reserve + other_live)
                    .min(budget.unwrap_or(u64::MAX)),
                self.target.interleaved_bytes() as u64,
                self.target.sync_cycles as u64,
                MATMUL_CANDIDATES_MAX,
            );
            tracing::debug!(
                op = name,
                two_d_cycles = candidates[0].0,
                ?k_split,
                "matmul splits"
            );
        }
        for (cost, exch, mem, pm, pn, chunks) in candidates.iter().take(FINALISTS) {
            self.finalists.push(Finalist {
                op: name.to_string(),
                mapping: format!(
                    "matmul rows/{pm} column-groups/{pn} k-chunks/{chunks} mode={mode:?}"
                ),
                estimated_cycles: *cost,
                estimated_exchange_cycles: *exch,
                peak_tile_bytes: *mem,
                tiles: (batch * pm * pn).min(tiles) as u32,
                alternatives: candidates.len(),
            });
        }
        let chosen = self.chosen(name, candidates.len().min(FINALISTS));
        let (cost, exch, _, pm, pn, k_chunks) = candidates[chosen];
        // Blocks in (batch, row, column) order, dealt to tiles round-robin.
        let mut blocks = Vec::new();
        // Blocks sharing a column range (the same weights) get consecutive tiles, so one
        // multicast exchange row can send them their weights.
        for bi in 0..batch {
            for j in 0..pn {
                for i in 0..pm {
                    let (m0, m1) = (m * i / pm, m * (i + 1) / pm);
                    let (g0, g1) = (groups * j / pn, groups * (j + 1) / pn);
                    if m1 > m0 && g1 > g0 {
                        let tile = (blocks.len() % tiles) as u32;
                        blocks.push(Block {
                            tile,
                            batch: bi,
                            m0,
                            m1,
                            g0,
                            g1,
                        });
                    }
                }
            }
        }
        // The output's layout: per block, per column group, its rows.
        let ranges = blocks.iter().flat_map(|bl| {
            (bl.g0..bl.g1).map(move |g| {
                let base = bl.batch * groups * m * geo.cols + g * m * geo.cols;
                (bl.tile, base + bl.m0 * geo.cols, base + bl.m1 * geo.cols)
            })
        });
        let layout = Layout::from_ranges(geo.cols, ranges.collect::<Vec<_>>());
        let c = self.add_value(
            format!("{name}.partials"),
            partials,
            out_shape.to_vec(),
            None,
            layout,
        );
        self.ops.push(DevOp {
            origin: self.origin.clone(),
            name: name.to_string(),
            kind: DevOpKind::MatMul {
                mode,
                blocks,
                pm,
                pn,
                k_chunks,
            },
            inputs: vec![a, b],
            output: c,
            estimated_cycles: cost,
            estimated_exchange_cycles: exch,
        });
        Ok(c)
    }
}

/// A 3-D split of a matmul (rows × column groups × k chunks on separate tiles) as costed by
/// [`k_split_estimate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KSplitEstimate {
    /// Row blocks.
    pub pm: usize,
    /// Column-group blocks.
    pub pn: usize,
    /// k chunks, each on its own tiles, reduced afterwards.
    pub splits: usize,
    /// Products and reduction, in cycles.
    pub cycles: u64,
    /// Of which exchange (operands and partials).
    pub exchange_cycles: u64,
    /// Of which the reduction stages (exchange and adds).
    pub reduce_cycles: u64,
    /// Bytes on the busiest tile.
    pub tile_bytes: u64,
}

/// The cheapest 3-D split of `[batch] m × k × n` in `mode` on `tiles` tiles whose busiest tile
/// holds at most `tile_bytes_max` (weights at most `interleaved_bytes_max`), by the same round
/// and exchange model as [`Planner::plan_matmul`]'s 2-D candidates plus the reduction of the
/// `splits` partials of every output element: one stage below 16 partials, two from 16, as
/// PopLibs' `ConvReducePlan` chooses (`ipu_target::reduce::reduce_plan`, after
/// `getMultiStageReducePlan` in `lib/poplin/ConvReducePlan.cpp`, graphcore/poplibs). Each
/// stage spreads its outputs over all tiles, receives their partials (`depth / next` per
/// output, in the partials type) in one exchange phase and adds them with the vector add
/// kernel (`Kernel::Binary` add, [`kernels::binary_slots`]) on six workers.
///
/// Only costed, not selectable: the lowering of the partial products and their reduction is not
/// written, and the reference's device precision of a split product
/// (`ipu_reference::gemm::matmul_device_k_split`) is not yet told the planner's choice.
#[allow(clippy::too_many_arguments)]
pub(crate) fn k_split_estimate(
    mode: AmpMode,
    (batch, m, k, n): (usize, usize, usize, usize),
    tiles: usize,
    tile_bytes_max: u64,
    interleaved_bytes_max: u64,
    sync_cycles: u64,
    candidates_max: usize,
) -> Option<KSplitEstimate> {
    let geo = amp_geometry(mode);
    let groups = n.div_ceil(geo.cols);
    let kb = k.div_ceil(geo.k_block);
    let slot = BARREL_SLOT_CYCLES as u64;
    let workers = WORKER_CONTEXTS as u64;
    let phase = EXCHANGE_PHASE_OVERHEAD_CYCLES as u64 + sync_cycles;
    let elem = if geo.out_bytes == 2 {
        kernels::Elem::F16
    } else {
        kernels::Elem::F32
    };
    let outputs = (batch * m * groups * geo.cols) as u64;
    let mut best: Option<KSplitEstimate> = None;
    let mut examined = 0;
    for splits in 2..=kb.min(ipu_target::reduce::K_SPLITS_MAX).min(tiles) {
        for pm in 1..=m.min(tiles / splits) {
            for pn in 1..=groups.min(tiles / splits / pm) {
                examined += 1;
                if examined > candidates_max {
                    return best;
                }
                let blocks = batch * pm * pn * splits;
                let per_tile = blocks.div_ceil(tiles) as u64;
                let bm = m.div_ceil(pm) as u64;
                let bg = groups.div_ceil(pn) as u64;
                let kc = kb.div_ceil(splits) as u64;
                let a_bytes = kc * geo.k_block as u64 * bm * geo.in_bytes as u64;
                let b_bytes = bg * kc * (geo.k_block * geo.cols * geo.in_bytes) as u64;
                let c_bytes = bg * bm * (geo.cols * geo.out_bytes) as u64;
                // The reduction's receive buffers on a tile: its share of the first stage's
                // inputs.
                let reduce_bytes =
                    (outputs * splits as u64 * geo.out_bytes as u64).div_ceil(tiles as u64);
                let mem = per_tile * (a_bytes + b_bytes + 2 * c_bytes + 4 * OVERREAD_BYTES as u64)
                    + reduce_bytes;
                if mem > tile_bytes_max || per_tile * b_bytes > interleaved_bytes_max {
                    continue;
                }
                let rows_per_worker = bm.div_ceil(workers) as u32;
                let weight_bytes = (geo.k_block * geo.cols * geo.in_bytes) as u64;
                let round = slot * kernels::amp_slots(rows_per_worker, true) as u64
                    + slot
                    + weight_bytes / AMP_WEIGHT_LOAD_BYTES_PER_CYCLE as u64
                    + slot * (2 + workers * 2 + 1);
                let compute = per_tile * bg * kc * round;
                let exchange =
                    per_tile * (a_bytes + b_bytes) / EXCHANGE_BYTES_PER_CYCLE as u64 + phase;
                let mut reduce = 0;
                let mut depth = splits as u64;
                let plan = ipu_target::reduce::reduce_plan(splits);
                for next in plan.iter().map(|&d| d as u64).chain(std::iter::once(1)) {
                    let out_per_tile = (outputs * next).div_ceil(tiles as u64);
                    let in_per_tile = out_per_tile * depth.div_ceil(next);
                    let moved = in_per_tile * geo.out_bytes as u64;
                    let vectors = (out_per_tile * geo.out_bytes as u64).div_ceil(8);
                    let adds = depth.div_ceil(next) - 1;
                    let per_worker = vectors.div_ceil(workers) as u32;
                    reduce += moved / EXCHANGE_BYTES_PER_CYCLE as u64
                        + phase
                        + adds
                            * slot
                            * kernels::binary_slots(elem, kernels::BinOp::Add, per_worker) as u64;
                    depth = next;
                }
                let cycles = compute + exchange + reduce;
                if best.is_none_or(|b| cycles < b.cycles) {
                    best = Some(KSplitEstimate {
                        pm,
                        pn,
                        splits,
                        cycles,
                        exchange_cycles: exchange,
                        reduce_cycles: reduce,
                        tile_bytes: mem,
                    });
                }
            }
        }
    }
    best
}

impl Lowerer<'_> {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn lower_matmul(
        &mut self,
        index: usize,
        mode: AmpMode,
        blocks: &[crate::plan::Block],
        k_chunks: usize,
        steps: &mut OpSteps,
    ) -> Result<(), CodegenError> {
        let op = &self.plan.ops[index];
        let name = op.name.clone();
        let (a, b, c) = (op.inputs[0], op.inputs[1], op.output);
        let geo = amp_geometry(mode);
        let (kblk, cols) = (geo.k_block, geo.cols);
        let (a_batch, m, k) = split_shape(&self.plan.values[a].shape);
        let (b_batch, _, n) = split_shape(&self.plan.values[b].shape);
        let groups = n.div_ceil(cols);
        let kb = k.div_ceil(kblk);
        let c_layout = self.plan.values[c].layout.clone();
        let row_bytes = (kblk * geo.in_bytes) as u32; // 32 for every mode
        let out_row_bytes = (cols * geo.out_bytes) as u32; // 32 for every mode
        let weight_bytes = (kblk * cols * geo.in_bytes) as u32;
        // Per block: its output buffer, the ping-pong partner (both live across the chunks)
        // and the output offset of each of its column groups.
        let mut outputs = Vec::with_capacity(blocks.len());
        for bl in blocks {
            let c_buf = self.value_buffer(c, bl.tile);
            let c_bytes = self.prog.buffers[c_buf.0 as usize].bytes;
            let t_buf = self
                .prog
                .buffer(bl.tile, c_bytes, Region::Any, format!("pingpong:{name}"));
            let mut offsets = Vec::new();
            for g in bl.g0..bl.g1 {
                let start = bl.batch * groups * m * cols + (g * m + bl.m0) * cols;
                let piece = c_layout
                    .pieces
                    .iter()
                    .find(|p| p.start == start && p.tile == bl.tile)
                    .ok_or_else(|| {
                        CodegenError::internal(format!("{name}: no output piece at {start}"))
                    })?;
                offsets.push(piece.local as u32 * geo.out_bytes as u32);
            }
            outputs.push((c_buf, t_buf, offsets));
        }
        let chunks = k_chunks.clamp(1, kb);
        for chunk in 0..chunks {
            let (kb0, kb1) = (kb * chunk / chunks, kb * (chunk + 1) / chunks);
            let kc = kb1 - kb0;
            let kcp = kc * kblk;
            let (k_lo, k_hi) = (kb0 * kblk, (kb1 * kblk).min(k));
            let mut step_copies: Vec<Copy> = Vec::new();
            let mut step_tiles: BTreeMap<u32, Vec<SupOp>> = BTreeMap::new();
            let mut weight_groups: BTreeMap<(usize, usize, usize), (u32, BTreeSet<u32>)> =
                BTreeMap::new();
            for (bl, (c_buf, t_buf, offsets)) in blocks.iter().zip(&outputs) {
                let (c_buf, t_buf) = (*c_buf, *t_buf);
                let bm = bl.m1 - bl.m0;
                let bg = bl.g1 - bl.g0;
                // A staging: [kc][bm][kblk].
                let a_bytes = (kc * bm) as u32 * row_bytes;
                let a_st = self.prog.buffer(
                    bl.tile,
                    a_bytes + OVERREAD_BYTES,
                    Region::Any,
                    format!("stage:{name}.a"),
                );
                let a_base = if a_batch == 1 {
                    0
                } else {
                    bl.batch * kb * m * kblk
                };
                let want: Vec<_> = (kb0..kb1)
                    .map(|g| {
                        let s = a_base + (g * m + bl.m0) * kblk;
                        (s, s + bm * kblk, (g - kb0) * bm * kblk)
                    })
                    .collect();
                let mut cp = self.gather(a, bl.tile, kblk, &want, a_st);
                // B staging (weights): [bg][kcp][cols], in interleaved memory.
                let b_bytes = (bg * kcp * cols) as u32 * geo.in_bytes as u32;
                let b_st = self.prog.buffer(
                    bl.tile,
                    b_bytes,
                    Region::Interleaved,
                    format!("stage:{name}.w"),
                );
                // Blocks with the same weights hold them at the same address (a placement
                // group), so the exchange can multicast them.
                let key = (if b_batch == 1 { 0 } else { bl.batch }, bl.g0, bl.g1);
                let entry = weight_groups
                    .entry(key)
                    .or_insert((u32::MAX, BTreeSet::new()));
                if entry.0 == u32::MAX || !entry.1.insert(bl.tile) {
                    // A new group: the first of its kind, or a second block of it on one tile.
                    *entry = (self.next_group, BTreeSet::from([bl.tile]));
                    self.next_group += 1;
                }
                self.prog.buffers[b_st.0 as usize].group = Some(entry.0);
                let b_base = if b_batch == 1 {
                    0
                } else {
                    bl.batch * groups * k * cols
                };
                let want: Vec<_> = (bl.g0..bl.g1)
                    .map(|g| {
                        let s = b_base + g * k * cols + k_lo * cols;
                        (s, s + (k_hi - k_lo) * cols, (g - bl.g0) * kcp * cols)
                    })
                    .collect();
                cp.extend(self.gather(b, bl.tile, cols, &want, b_st));
                let mut ops = Vec::new();
                self.zero_gaps(a_st, a_bytes, &cp, &mut ops);
                self.zero_gaps(b_st, b_bytes, &cp, &mut ops);
                if !ops.is_empty() {
                    ops.push(SupOp::WaitW);
                }
                step_copies.extend(cp);
                for (gi, g) in (bl.g0..bl.g1).enumerate() {
                    let c_off = offsets[gi];
                    for kk in kb0..kb1 {
                        let w_off = ((g - bl.g0) * kcp + (kk - kb0) * kblk) as u32
                            * (cols * geo.in_bytes) as u32;
                        debug_assert_eq!(w_off % weight_bytes, 0);
                        ops.push(SupOp::AmpW(b_st, w_off));
                        // The last round writes the output buffer; rounds alternate before it.
                        let (dst, src) = if (kb - 1 - kk) % 2 == 0 {
                            (c_buf, t_buf)
                        } else {
                            (t_buf, c_buf)
                        };
                        for (r0, r1) in split_staggered(bm as u32) {
                            if r1 > r0 {
                                let a_row = ((kk - kb0) * bm) as u32 * row_bytes + r0 * row_bytes;
                                ops.push(amp_run(
                                    (a_st, a_row),
                                    (kk > 0).then_some((src, c_off + r0 * out_row_bytes)),
                                    (dst, c_off + r0 * out_row_bytes),
                                    r1 - r0,
                                ));
                            }
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
                    tiles: step_tiles,
                    estimated_cycles,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 3-D estimate of the transformer shapes on 1472 tiles (f16 operands, f32 partials), with
    /// the whole tile as the limit less the support reserve; printed for docs/perf.md.
    #[test]
    fn k_split_estimates_of_the_transformer_shapes() {
        let target = ipu_target::Target::gc200();
        let tile = target.memory_bytes() as u64 - crate::plan::SUPPORT_RESERVE_BYTES;
        for (m, k, n) in [
            (2048, 2048, 2048),
            (512, 768, 3072),
            (512, 3072, 768),
            (128, 768, 768),
            (4096, 4096, 4096),
        ] {
            let e = k_split_estimate(
                AmpMode::F16F32,
                (1, m, k, n),
                1472,
                tile,
                target.interleaved_bytes() as u64,
                target.sync_cycles as u64,
                MATMUL_CANDIDATES_MAX,
            );
            println!("{m}x{k}x{n}: {e:?}");
            if let Some(e) = e {
                assert!(e.splits >= 2 && e.pm * e.pn * e.splits <= 1472);
                assert!(e.tile_bytes <= tile && e.reduce_cycles < e.cycles);
            }
        }
    }
}
