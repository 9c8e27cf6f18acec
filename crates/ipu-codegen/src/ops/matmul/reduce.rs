//! The reduction of a k split's partials: where each tile sums them (beside its own block's
//! partials, or balanced over the tiles), the stages ([`SumSplits`], one below 16 partials and
//! two from 16), their cost and their lowering.

use ipu_graph::DType;
use ipu_target::{
    AmpMode, EXCHANGE_BYTES_PER_CYCLE, EXCHANGE_PHASE_OVERHEAD_CYCLES, WORKER_CONTEXTS,
};

use super::blocks::Block;
use crate::cost::estimate;
use crate::error::CodegenError;
use crate::layout::Layout;
use crate::lower::{Lowerer, OpSteps};
use crate::operator_plan::{DevOp, DevOpKind, DevValueId, FamilyOp};
use crate::plan::{Planner, elem};
use crate::program::{BufferId, SupOp};
use ipu_kernels as kernels;

/// The sums of runs of a stacked value `[depth, ..]` (the partials of a k split; a device
/// operation): run `i` adds slices `depth * i / runs .. depth * (i + 1) / runs` in index
/// order; the output is `[runs, ..]`, or the slices' shape for one run. Each slice of the
/// output is spread over the tiles alike, and each tile adds its share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SumSplits {
    /// Runs (the depth after this stage).
    pub runs: usize,
}

impl FamilyOp for SumSplits {
    fn lower(&self, lowerer: &mut Lowerer<'_>, index: usize) -> Result<(), CodegenError> {
        lowerer.lower_steps(index, |l, steps| {
            l.lower_sum_splits(index, self.runs, steps)
        })
    }
}

/// One stage of the reduction of a k split's partials, as costed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReduceStage {
    /// The depth after the stage.
    pub runs: usize,
    /// The stage's cycles: its exchange (none when its inputs are already where it adds
    /// them), the additions and the sync.
    pub cycles: u64,
    /// Of which exchange.
    pub exchange_cycles: u64,
}

/// The most elements of one slice of `slice` storage elements a tile holds when
/// [`Layout::balanced`] spreads it over `tiles` tiles.
fn balanced_share(slice: usize, tiles: usize) -> usize {
    let units = slice / crate::layout::PIECE_GRAIN;
    let used = tiles.clamp(1, units.max(1));
    units.div_ceil(used) * crate::layout::PIECE_GRAIN
}

/// The vector-kernel type of `mode`'s partials.
fn partials_elem(mode: AmpMode) -> kernels::Elem {
    if mode.geometry().partial_bytes == 2 {
        kernels::Elem::F16
    } else {
        kernels::Elem::F32
    }
}

/// A tile's part in a k split's reduction: the elements of each partial slice it sums, and
/// whether it holds one of those slices itself (it computed that part of the block).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct ReduceShare {
    pub elements: usize,
    pub held: bool,
}

impl ReduceShare {
    /// The share of a tile when [`Layout::balanced`] spreads each slice of `slice` storage
    /// elements over `tiles` tiles (every slice then arrives by exchange).
    pub(super) fn balanced(slice: usize, tiles: usize) -> ReduceShare {
        ReduceShare {
            elements: balanced_share(slice, tiles),
            held: false,
        }
    }

    /// The share of a tile when [`block_shares`] cuts blocks of `block` storage elements into
    /// `splits` shares.
    pub(super) fn of_block(block: usize, splits: usize) -> ReduceShare {
        let units = block / crate::layout::PIECE_GRAIN;
        ReduceShare {
            elements: units.div_ceil(splits) * crate::layout::PIECE_GRAIN,
            held: true,
        }
    }
}

/// Bytes a product tile holding `c_bytes` of partials sends to the reduction: all of them, or
/// all but the share it sums itself.
pub(super) fn reduce_sends(c_bytes: u64, splits: usize, held: bool) -> u64 {
    if held {
        c_bytes - c_bytes / splits as u64
    } else {
        c_bytes
    }
}

/// The reduction's slice of the output when every tile holds one block at most: the
/// `k_splits` tiles of a block (one per split, alike in rows and columns) take a share each
/// of its elements in storage order, cut at multiples of [`crate::layout::PIECE_GRAIN`], the
/// tile of split `s` share `s`. Each then sums beside the partials it computed itself (no
/// exchange for them), and a block's partials move only among its own tiles. `None` when a
/// tile holds several blocks.
pub(super) fn block_shares(
    blocks: &[Block],
    k_splits: usize,
    groups: usize,
    m: usize,
    cols: usize,
    tiles: usize,
) -> Option<Layout> {
    let grain = crate::layout::PIECE_GRAIN;
    if blocks.len() > tiles || !cols.is_multiple_of(grain) {
        return None;
    }
    let mut ranges = Vec::new();
    for bl in blocks {
        // The block's storage ranges in order, one per column group.
        let parts: Vec<(usize, usize)> = (bl.g0..bl.g1)
            .map(|g| {
                let base = bl.batch * groups * m * cols + g * m * cols;
                (base + bl.m0 * cols, base + bl.m1 * cols)
            })
            .collect();
        let units = parts.iter().map(|r| r.1 - r.0).sum::<usize>() / grain;
        let (from, to) = (
            units * bl.split / k_splits * grain,
            units * (bl.split + 1) / k_splits * grain,
        );
        // Share `split` of the ranges laid end to end.
        let mut at = 0;
        for (a, b) in parts {
            let (s, e) = (from.max(at), to.min(at + b - a));
            if e > s {
                ranges.push((bl.tile, a + s - at, a + e - at));
            }
            at += b - a;
        }
    }
    Some(Layout::from_ranges(cols, ranges))
}

/// The stages reducing `splits` partial slices, each tile summing `share` of every slice (one
/// stage below 16 partials, two from 16, as PopLibs' `ConvReducePlan` chooses:
/// `ipu_target::reduce::reduce_plan`, after `getMultiStageReducePlan` in
/// `lib/poplin/ConvReducePlan.cpp`, graphcore/poplibs). Every stage spreads each of its output
/// slices over the tiles alike, so only the first moves data: each tile receives its share of
/// every partial slice it does not hold, while a product tile sends its partials
/// (`send_bytes`); later stages add what their tiles already hold. The additions are the
/// lowering's own ([`sum_splits_ops`]), costed by the supervisor model; every stage ends with
/// a sync of `sync_cycles`.
pub(crate) fn reduce_estimates(
    mode: AmpMode,
    share: ReduceShare,
    splits: usize,
    sync_cycles: u64,
    send_bytes: u64,
) -> Vec<ReduceStage> {
    let eb = mode.geometry().partial_bytes as u64;
    let n = share.elements;
    let plan = ipu_target::reduce::reduce_plan(splits);
    let mut depth = splits;
    let mut stages = Vec::new();
    for (i, runs) in plan.iter().copied().chain(std::iter::once(1)).enumerate() {
        let mut ops = sum_splits_ops(
            partials_elem(mode),
            eb as u32,
            n as u32,
            depth,
            runs,
            (
                &Slices::consecutive((BufferId(0), 0), depth, n as u32 * eb as u32),
                (BufferId(0), 0),
                (BufferId(0), 0),
            ),
        );
        ops.push(SupOp::WaitW);
        let exchange = if i == 0 {
            let recv = (depth - usize::from(share.held)) as u64 * n as u64 * eb;
            recv.max(send_bytes) / EXCHANGE_BYTES_PER_CYCLE as u64
                + EXCHANGE_PHASE_OVERHEAD_CYCLES as u64
        } else {
            0
        };
        stages.push(ReduceStage {
            runs,
            cycles: exchange + estimate(&ops) + sync_cycles,
            exchange_cycles: exchange,
        });
        depth = runs;
    }
    stages
}

/// Where a reduction stage's input slices lie on a tile (buffer and byte offset each): in the
/// partials' own buffer where the tile computed them, the others staged in two buffers by
/// turns. So the first addition of every run reads two buffers, which placement can keep in
/// different memory elements (`State::co_loaded`); in one buffer its two loads would share
/// an element wherever the slices do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Slices(pub Vec<(BufferId, u32)>);

impl Slices {
    /// `depth` slices of `slice_bytes` one after another in one buffer from `at`.
    pub(crate) fn consecutive(at: (BufferId, u32), depth: usize, slice_bytes: u32) -> Slices {
        Slices(
            (0..depth as u32)
                .map(|s| (at.0, at.1 + s * slice_bytes))
                .collect(),
        )
    }

    /// Where slice `s` starts.
    pub(crate) fn at(&self, s: usize) -> (BufferId, u32) {
        self.0[s]
    }
}

/// The supervisor work of one tile's share of a [`SumSplits`] stage: `recv` holds
/// the `depth` input slices' `n` elements ([`Slices`]), `out` the `runs` output slices' one
/// after another, `temp` room for as many (buffer and byte offset each). Run `i` adds
/// its slices in index order, each addition into `out` or `temp` by turns so that the last
/// writes `out` (the vector add reads a little past its end, so it never adds in place: a
/// neighbouring worker's read would meet this one's write); the runs' `j`-th additions share
/// a wave of the workers, and a wait separates the waves.
pub(crate) fn sum_splits_ops(
    ty: kernels::Elem,
    eb: u32,
    n: u32,
    depth: usize,
    runs: usize,
    (recv, out, temp): (&Slices, (BufferId, u32), (BufferId, u32)),
) -> Vec<SupOp> {
    let vectors = n * eb / 8;
    let run = |i: usize| (depth * i / runs, depth * (i + 1) / runs);
    let longest = (0..runs).map(|i| run(i).1 - run(i).0).max().unwrap_or(0);
    let at = |buf: (BufferId, u32), slice: usize| (buf.0, buf.1 + slice as u32 * n * eb);
    let mut ops = Vec::new();
    for j in 1..longest {
        // The additions into `out`, then those into `temp`, each set in its own wave: one
        // run's read past its slice of one must not meet another's write to the next slice.
        for to_out in [true, false] {
            let mut wave = Vec::new();
            for i in 0..runs {
                let (s0, s1) = run(i);
                if s0 + j >= s1 {
                    continue;
                }
                // Addition `j` of `len - 1` writes `out` when an even number follow it.
                let into_out = |j: usize| (s1 - s0 - 1 - j).is_multiple_of(2);
                if into_out(j) != to_out {
                    continue;
                }
                let into = |j: usize| {
                    if into_out(j) { at(out, i) } else { at(temp, i) }
                };
                let a = if j == 1 { recv.at(s0) } else { into(j - 1) };
                let b = recv.at(s0 + j);
                let o = into(j);
                for (v0, v1) in crate::lower::split(vectors, WORKER_CONTEXTS) {
                    if v1 > v0 {
                        wave.push(SupOp::Run(
                            kernels::Kernel::Binary {
                                ty,
                                op: kernels::BinOp::Add,
                            },
                            kernels::state::BinaryState {
                                a: (a.0, a.1 + v0 * 8),
                                b: (b.0, b.1 + v0 * 8),
                                out: (o.0, o.1 + v0 * 8),
                                vectors: v1 - v0,
                            }
                            .into(),
                            kernels::binary_slots(ty, kernels::BinOp::Add, v1 - v0),
                        ));
                    }
                }
            }
            if !wave.is_empty() {
                if !ops.is_empty() {
                    ops.push(SupOp::WaitW);
                }
                ops.extend(wave);
            }
        }
    }
    ops
}

/// The element offset in a tile's buffer of a value at which the tile holds the ranges `mine`
/// (start, end, offset within the slice) of the slice starting at element `base`, one after
/// another in that order; `held` is the value's ranges on the tile (start, end, offset).
/// `None` where they are not all there so.
fn held_in_place(
    held: &[(usize, usize, usize)],
    mine: &[(usize, usize, usize)],
    base: usize,
) -> Option<usize> {
    let mut first = None;
    for &(a, b, l) in mine {
        let (a, b) = (base + a, base + b);
        let &(ha, _, hl) = held.iter().find(|h| h.0 <= a && b <= h.1)?;
        let at = (hl + (a - ha)).checked_sub(l)?;
        if *first.get_or_insert(at) != at {
            return None;
        }
    }
    first
}

/// A k split's reduction as planned: one slice of the sums laid out as each tile sums it, and
/// the stages, costed.
pub(super) struct Reduction {
    /// One slice of the output, each tile's share where it sums it ([`block_shares`], or
    /// balanced over the tiles).
    one: Layout,
    /// Storage elements of one slice.
    slice: usize,
    /// The column group of the slices.
    cols: usize,
    /// The stages in order.
    stages: Vec<ReduceStage>,
}

impl Reduction {
    /// The stages' cycles and their exchange part.
    pub(super) fn cycles(&self) -> (u64, u64) {
        (
            self.stages.iter().map(|r| r.cycles).sum(),
            self.stages.iter().map(|r| r.exchange_cycles).sum(),
        )
    }
}

impl Planner<'_> {
    /// The reduction of the `k_splits` partial slices of `blocks` (a 3-D split into `pm` × `pn`
    /// blocks a split, of `batch` entries of `m` rows and `groups` column groups in `mode`):
    /// each element is summed beside a share of the block that computed it when every tile
    /// holds one block at most, else the slices are spread over all tiles.
    pub(super) fn plan_reduction(
        &self,
        mode: AmpMode,
        blocks: &[Block],
        (pm, pn, k_splits): (usize, usize, usize),
        batch: usize,
        (m, groups): (usize, usize),
        out_shape: &[usize],
    ) -> Reduction {
        let geo = mode.geometry();
        let cols = geo.columns as usize;
        let tiles = self.tiles as usize;
        let slice = batch * groups * m * cols;
        let shares = block_shares(blocks, k_splits, groups, m, cols, tiles);
        let per_tile = (batch * pm * pn * k_splits).div_ceil(tiles) as u64;
        let c_bytes =
            (groups.div_ceil(pn) * m.div_ceil(pm) * cols) as u64 * geo.partial_bytes as u64;
        let share = match &shares {
            Some(l) => ReduceShare {
                elements: l.most_elements_on_a_tile(),
                held: true,
            },
            None => ReduceShare::balanced(slice, tiles),
        };
        let stages = reduce_estimates(
            mode,
            share,
            k_splits,
            self.target.sync_cycles as u64,
            reduce_sends(per_tile * c_bytes, k_splits, share.held),
        );
        let one = shares.unwrap_or_else(|| Layout::balanced(out_shape, cols, tiles as u32));
        Reduction {
            one,
            slice,
            cols,
            stages,
        }
    }

    /// Pushes the stages of `reduction` reducing `partials` (matmul `name`'s `[k_splits, ..]`
    /// of `dtype`, of `out_shape` a slice), each stage's slices spread alike over the tiles;
    /// returns the sum.
    pub(super) fn push_reduction(
        &mut self,
        name: &str,
        (partials, dtype): (DevValueId, DType),
        out_shape: &[usize],
        reduction: &Reduction,
    ) -> DevValueId {
        let Reduction {
            one,
            slice,
            cols,
            stages,
        } = reduction;
        let mut x = partials;
        for (i, r) in stages.iter().enumerate() {
            let ranges = (0..r.runs).flat_map(|s| {
                one.pieces
                    .iter()
                    .map(move |p| (p.tile, s * slice + p.start, s * slice + p.end))
            });
            let layout = Layout::from_ranges(*cols, ranges.collect::<Vec<_>>());
            let mut shape = out_shape.to_vec();
            let last = i + 1 == stages.len();
            if !last {
                shape.insert(0, r.runs);
            }
            let value_name = if last {
                format!("{name}.partials")
            } else {
                format!("{name}.reduce{i}")
            };
            let y = self.add_value(value_name, dtype, shape, None, layout);
            self.ops.push(DevOp {
                origin: self.origin.clone(),
                name: format!("{name}.reduce{i}"),
                kind: DevOpKind::new(SumSplits { runs: r.runs }),
                inputs: vec![x],
                output: y,
                estimated_cycles: r.cycles,
                estimated_exchange_cycles: r.exchange_cycles,
            });
            x = y;
        }
        x
    }
}

impl Lowerer<'_> {
    /// A [`SumSplits`] stage: every tile of the output receives its share of every
    /// input slice (none when the input already sits there in that order, as after an earlier
    /// stage) and adds them ([`sum_splits_ops`]).
    pub(crate) fn lower_sum_splits(
        &mut self,
        index: usize,
        runs: usize,
        steps: &mut OpSteps,
    ) -> Result<(), CodegenError> {
        let op = &self.plan.ops[index];
        let (x, out) = (op.inputs[0], op.output);
        let name = op.name.clone();
        let xv = &self.plan.values[x];
        let depth = xv.shape[0];
        let group = xv.layout.group;
        let x_slice = ipu_package::storage_elements(&xv.shape, group) / depth;
        let ty = elem(xv.dtype)
            .ok_or_else(|| CodegenError::internal(format!("{name}: partials of {}", xv.dtype)))?;
        let eb = self.eb(x);
        let out_layout = self.plan.values[out].layout.clone();
        let x_layout = xv.layout.clone();
        for tile in out_layout.tiles() {
            // The tile's share of output slice 0; every other slice has the same ranges, at
            // `slice * n` elements further in the buffer.
            let mine: Vec<(usize, usize, usize)> = out_layout
                .ranges_on(tile)
                .into_iter()
                .filter(|r| r.0 < x_slice)
                .collect();
            let n: usize = mine.iter().map(|r| r.1 - r.0).sum();
            // Each slice in place where this tile holds it in that order, as a product tile
            // holds its own share ([`block_shares`]) or an earlier stage its sums; the others
            // staged, by turns in two buffers ([`Slices`]).
            let held = x_layout.ranges_on(tile);
            let in_place: Vec<Option<u32>> = (0..depth)
                .map(|s| held_in_place(&held, &mine, s * x_slice).map(|l| l as u32 * eb))
                .collect();
            let staged: Vec<usize> = (0..depth).filter(|&s| in_place[s].is_none()).collect();
            let mut stage_buffers = [None, None];
            for (parity, what) in [(0, "even"), (1, "odd")] {
                let mine_staged: Vec<usize> =
                    staged.iter().copied().skip(parity).step_by(2).collect();
                if mine_staged.is_empty() {
                    continue;
                }
                let st = self.scratch_buffer(
                    tile,
                    (mine_staged.len() * n) as u32 * eb,
                    format!("stage:{name}.partials.{what}"),
                );
                let part: Vec<(usize, usize, usize)> = mine_staged
                    .iter()
                    .enumerate()
                    .flat_map(|(k, &s)| {
                        mine.iter()
                            .map(move |&(a, b, l)| (s * x_slice + a, s * x_slice + b, k * n + l))
                    })
                    .collect();
                let copies = self.gather(x, tile, group, &part, st);
                steps.copies.extend(copies);
                stage_buffers[parity] = Some(st);
            }
            let xb = self.value_buffer(x, tile);
            let mut k = 0;
            let recv = Slices(
                (0..depth)
                    .map(|s| match in_place[s] {
                        Some(at) => (xb, at),
                        None => {
                            let st = stage_buffers[k % 2].expect("staged");
                            k += 1;
                            (st, ((k - 1) / 2 * n) as u32 * eb)
                        }
                    })
                    .collect(),
            );
            let ob = self.value_buffer(out, tile);
            let temp =
                self.scratch_buffer(tile, (runs * n) as u32 * eb, format!("pingpong:{name}"));
            let ops = sum_splits_ops(ty, eb, n as u32, depth, runs, (&recv, (ob, 0), (temp, 0)));
            steps.tiles.entry(tile).or_default().extend(ops);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::*;

    /// The reduction's additions sum every run in index order into its slice of the output,
    /// and no wave reads (its own slice or, past its end, the next) what another of its
    /// launches writes; with the slices staged by turns in two buffers (one of them maybe in
    /// place in a third, as a product tile's own share), no addition reads one buffer twice.
    #[test]
    fn sum_splits_adds_runs_in_order_without_a_race() {
        use kernels::state::State;
        let (recv, out, temp, odd, own) = (
            BufferId(1),
            BufferId(2),
            BufferId(3),
            BufferId(4),
            BufferId(5),
        );
        let n = 64u32;
        let slice_bytes = n * 4;
        for (depth, split, held_at) in
            (2..40).flat_map(|d| [(d, false, None), (d, true, None), (d, true, Some(d / 3))])
        {
            let slices = if split {
                let mut k = 0;
                Slices(
                    (0..depth)
                        .map(|s| {
                            if held_at == Some(s) {
                                return (own, 0);
                            }
                            k += 1;
                            let b = if (k - 1) % 2 == 0 { recv } else { odd };
                            (b, (k - 1) as u32 / 2 * slice_bytes)
                        })
                        .collect(),
                )
            } else {
                Slices::consecutive((recv, 0), depth, slice_bytes)
            };
            for runs in 1..=depth / 2 {
                let ops = sum_splits_ops(
                    kernels::Elem::F32,
                    4,
                    n,
                    depth,
                    runs,
                    (&slices, (out, 0), (temp, 0)),
                );
                // What each (buffer, slice) holds: the input slices summed into it, in order.
                let mut held: BTreeMap<(u32, u32), Vec<usize>> = BTreeMap::new();
                for s in 0..depth {
                    let (b, at) = slices.at(s);
                    held.insert((b.0, at / slice_bytes), vec![s]);
                }
                for wave in ops.split(|o| *o == SupOp::WaitW) {
                    let mut reads = BTreeSet::new();
                    let mut writes = BTreeSet::new();
                    let mut results = Vec::new();
                    for op in wave {
                        let Some((_, State::Binary(st))) = op.launch() else {
                            panic!("{op:?}");
                        };
                        let slot = |l: (BufferId, u32)| (l.0.0, l.1 / slice_bytes);
                        let (a, b, o) = (slot(st.a), slot(st.b), slot(st.out));
                        if split {
                            assert_ne!(a.0, b.0, "depth {depth} runs {runs}: one buffer twice");
                        }
                        for r in [a, b] {
                            reads.insert(r);
                            reads.insert((r.0, r.1 + 1));
                        }
                        writes.insert(o);
                        if st.a.1 % slice_bytes == 0 {
                            let mut sum = held[&a].clone();
                            sum.extend(&held[&b]);
                            results.push((o, sum));
                        }
                    }
                    assert!(reads.is_disjoint(&writes), "depth {depth} runs {runs}");
                    held.extend(results);
                }
                for i in 0..runs {
                    let want: Vec<usize> = (depth * i / runs..depth * (i + 1) / runs).collect();
                    assert_eq!(
                        held[&(2, i as u32)],
                        want,
                        "depth {depth} runs {runs} run {i}"
                    );
                }
            }
        }
    }

    /// The reduction's shares cover the output once, each on a tile of the block that computed
    /// it, a block's shares balanced within a grain, and each tile's share sits in its own
    /// partials in order (summed in place).
    #[test]
    fn block_shares_cover_the_output_once_beside_the_partials_that_made_them() {
        let (m, groups, cols, splits) = (37, 5, 8, 3);
        let (pm, pn) = (2, 2);
        let mut blocks = Vec::new();
        for split in 0..splits {
            for i in 0..pm {
                for j in 0..pn {
                    blocks.push(Block {
                        tile: blocks.len() as u32,
                        batch: 0,
                        m0: m * i / pm,
                        m1: m * (i + 1) / pm,
                        g0: groups * j / pn,
                        g1: groups * (j + 1) / pn,
                        split,
                    });
                }
            }
        }
        let tiles = blocks.len();
        assert!(block_shares(&blocks, splits, groups, m, cols, tiles - 1).is_none());
        let shares = block_shares(&blocks, splits, groups, m, cols, tiles).expect("one a tile");
        let slice = groups * m * cols;
        let mut covered = vec![0u8; slice];
        for p in &shares.pieces {
            covered[p.start..p.end].iter_mut().for_each(|c| *c += 1);
        }
        assert!(covered.iter().all(|&c| c == 1));
        for bl in &blocks {
            let mine = shares.ranges_on(bl.tile);
            let n: usize = mine.iter().map(|r| r.1 - r.0).sum();
            let block = (bl.m1 - bl.m0) * (bl.g1 - bl.g0) * cols;
            assert!(
                n.abs_diff(block / splits) <= crate::layout::PIECE_GRAIN,
                "{n} {block}"
            );
            // The product's layout on the tile: its column groups' rows, in order.
            let held: Vec<(usize, usize, usize)> = (bl.g0..bl.g1)
                .enumerate()
                .map(|(k, g)| {
                    let base = bl.split * slice + g * m * cols;
                    let rows = (bl.m1 - bl.m0) * cols;
                    (base + bl.m0 * cols, base + bl.m1 * cols, k * rows)
                })
                .collect();
            let at = held_in_place(&held, &mine, bl.split * slice).expect("in place");
            let first = mine.first().expect("a share");
            let x = bl.split * slice + first.0;
            let (ha, _, hl) = held.iter().find(|h| h.0 <= x && x < h.1).unwrap();
            assert_eq!(at, hl + x - ha);
            let other = (bl.split + 1) % splits;
            assert!(held_in_place(&held, &mine, other * slice).is_none());
        }
    }
}
