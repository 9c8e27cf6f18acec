//! Matrix products on the AMP: the planner splits rows, column groups and (when the
//! operands do not fit) k into serial chunks, costs every split and keeps the finalists; the
//! lowering stages each block's rows of `a` and weight blocks of `b` and runs AMP rounds with
//! ping-pong partials.

use std::collections::{BTreeMap, BTreeSet};

use ipu_graph::{DType, Operation, Value};
use ipu_package::split_shape;
use ipu_target::{
    AMP_WEIGHT_LOAD_BYTES_PER_CYCLE, AmpGeometry, AmpMode, BARREL_SLOT_CYCLES,
    EXCHANGE_BYTES_PER_CYCLE, EXCHANGE_PHASE_OVERHEAD_CYCLES, WORKER_CONTEXTS,
};

use super::unsupported;
use crate::error::{CodegenError, MemoryRegion};
use crate::layout::Layout;
use crate::lower::*;
use crate::operator_plan::*;
use crate::ops::elementwise::Elementwise;
use crate::plan::*;
use crate::program::*;
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
        let geo = mode.geometry();
        let (kblk, cols) = (geo.k as usize, geo.columns as usize);
        let (in_bytes, out_bytes) = (geo.input_bytes as u64, geo.partial_bytes as u64);
        let (batch, m, n) = ipu_package::split_shape(out_shape);
        let k = *self.values[a].shape.last().unwrap_or(&1);
        let groups = n.div_ceil(cols);
        let kb = k.div_ceil(kblk);
        let kp = kb * kblk;
        let mut candidates: Vec<Candidate> = Vec::new();
        let mut examined = 0;
        // The candidate that misses by the least: (bytes over in total, bytes over in
        // interleaved memory, bytes per tile, pm, pn).
        let mut closest: Option<(u64, u64, u64, usize, usize)> = None;
        let tiles = self.tiles as usize;
        // What other live values hold on the busiest tile meanwhile.
        let other_live = self.other_live_bytes();
        let budget = self.budget();
        let reserve = self.support_reserve_bytes;
        let rounds_max = amp_rounds_max(self.target);
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
        let homes = OperandHomes {
            a: held(a),
            a_fanout: fanout(a),
            b: held(b),
            b_fanout: fanout(b),
        };
        // The fitting split with the fewest AMP rounds a tile beyond `rounds_max`.
        let mut fewest_rounds = None;
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
                let a_bytes = kp as u64 * bm * in_bytes;
                let b_bytes = bg * kp as u64 * (cols as u64 * in_bytes);
                let c_bytes = bg * bm * (cols as u64 * out_bytes);
                // Serial k chunks when memory demands: the fewest that fit (each chunk adds an
                // exchange phase and a sync, and stages only its share of the operands).
                let fits = |chunks: u64| {
                    let other = other_live;
                    let share = (kb as u64).div_ceil(chunks);
                    let (a, b) = (a_bytes / kb as u64 * share, b_bytes / kb as u64 * share);
                    let states = rounds_support(per_tile * bg * kb as u64);
                    let mem = per_tile * (a + b + 2 * c_bytes + 4 * kernels::OVERREAD_BYTES as u64)
                        + states;
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
                let rounds = per_tile * bg * kb as u64;
                if rounds > rounds_max {
                    // Its supervisor program would not fit executable memory.
                    if fewest_rounds.is_none_or(|r: (u64, usize, usize)| rounds < r.0) {
                        fewest_rounds = Some((rounds, pm, pn));
                    }
                    continue;
                }
                let compute = rounds_cycles(
                    &geo,
                    ((m / pm) as u64, bm),
                    per_tile * bg * kb as u64,
                    per_tile * chunks,
                    bg,
                );
                // Both orders of the blocks, unless one run is every block of a row range
                // (pn = 1: the orders agree).
                for consecutive in [Consecutive::Weights, Consecutive::Rows] {
                    if consecutive == Consecutive::Rows && pn == 1 {
                        continue;
                    }
                    // For serial chunks a bound: each stages one k range, which every tile
                    // holds a share of when the operand is only this matmul's
                    // (`spread_chunk_homes`).
                    let moved = (per_tile * staged_receive(a_bytes, b_bytes, pm, pn, consecutive))
                        .max(operand_sends(&homes, pm, pn, consecutive));
                    let exchange = moved / EXCHANGE_BYTES_PER_CYCLE as u64
                        + chunks
                            * (EXCHANGE_PHASE_OVERHEAD_CYCLES + self.target.sync_cycles) as u64;
                    candidates.push((
                        compute + exchange,
                        exchange,
                        mem,
                        pm,
                        pn,
                        chunks as usize,
                        1,
                        consecutive,
                    ));
                }
            }
        }
        if k_split {
            let limit = (self.target.memory_bytes() as u64)
                .saturating_sub(reserve + other_live)
                .min(budget.unwrap_or(u64::MAX));
            let shape = KSplitShape {
                mode,
                batch,
                m,
                k,
                n,
                tiles,
                rounds_max,
                homes,
            };
            let found = k_split_candidates(
                &shape,
                limit,
                self.target.interleaved_bytes() as u64,
                self.target.sync_cycles as u64,
                MATMUL_CANDIDATES_MAX,
            );
            for e in found {
                if self.search.spend() && !candidates.is_empty() {
                    break;
                }
                candidates.push((
                    e.cycles,
                    e.exchange_cycles,
                    e.tile_bytes,
                    e.pm,
                    e.pn,
                    1,
                    e.splits,
                    e.consecutive,
                ));
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
                None => match fewest_rounds {
                    Some((rounds, pm, pn)) => {
                        let executable =
                            (self.target.executable_end - self.target.executable_base) as u64;
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
                    None => CodegenError::unsupported(
                        self.origin.clone(),
                        format!("its matmul: {examined} tile mappings examined, none usable"),
                    ),
                },
            });
        }
        candidates.sort_by_key(|c| (c.0, c.2, c.3, c.4, c.6, c.7));
        for (cost, exch, mem, pm, pn, chunks, splits, consecutive) in
            candidates.iter().take(FINALISTS)
        {
            let mut mapping = if *splits > 1 {
                format!("matmul rows/{pm} column-groups/{pn} k-splits/{splits} mode={mode:?}")
            } else {
                format!("matmul rows/{pm} column-groups/{pn} k-chunks/{chunks} mode={mode:?}")
            };
            if *consecutive == Consecutive::Rows {
                mapping.push_str(" consecutive=rows");
            }
            let tiles = if *splits > 1 {
                tiles
            } else {
                (batch * pm * pn).min(tiles)
            };
            self.finalists.push(Finalist {
                op: name.to_string(),
                mapping,
                estimated_cycles: *cost,
                estimated_exchange_cycles: *exch,
                peak_tile_bytes: *mem,
                tiles: tiles as u32,
                alternatives: candidates.len(),
            });
        }
        let chosen = self.chosen(name, candidates.len().min(FINALISTS));
        let (cost, exch, _, pm, pn, k_chunks, k_splits, consecutive) = candidates[chosen];
        if k_chunks > 1 {
            self.spread_chunk_homes(mode, [a, b], k_chunks);
        }
        // Blocks dealt to tiles round-robin in (split, batch, column, row) order, so that the
        // blocks sharing a column range (the same weights) get consecutive tiles and one
        // multicast exchange row can send them their weights; with `Rows`, in (split, batch,
        // row, column) order, the blocks sharing rows of `a`.
        let mut blocks = Vec::new();
        for split in 0..k_splits {
            for bi in 0..batch {
                let (outer, inner) = match consecutive {
                    Consecutive::Weights => (pn, pm),
                    Consecutive::Rows => (pm, pn),
                };
                for o in 0..outer {
                    for x in 0..inner {
                        let (i, j) = match consecutive {
                            Consecutive::Weights => (x, o),
                            Consecutive::Rows => (o, x),
                        };
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
                                split,
                            });
                        }
                    }
                }
            }
        }
        // The output's layout: per block, per column group, its rows; a k split's partials
        // are slice `split` of `[k_splits, ..]`.
        let slice = batch * groups * m * cols;
        let ranges = blocks.iter().flat_map(|bl| {
            (bl.g0..bl.g1).map(move |g| {
                let base = bl.split * slice + bl.batch * groups * m * cols + g * m * cols;
                (bl.tile, base + bl.m0 * cols, base + bl.m1 * cols)
            })
        });
        let layout = Layout::from_ranges(cols, ranges.collect::<Vec<_>>());
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
        // Where the reduction sums each element: beside a share of the block that computed it
        // when every tile holds one block at most, else spread over all tiles.
        let shares = (k_splits > 1)
            .then(|| block_shares(&blocks, k_splits, groups, m, cols, tiles))
            .flatten();
        let reduce = if k_splits > 1 {
            let per_tile = (batch * pm * pn * k_splits).div_ceil(tiles) as u64;
            let c_bytes = (groups.div_ceil(pn) * m.div_ceil(pm) * cols) as u64 * out_bytes;
            let share = match &shares {
                Some(l) => ReduceShare {
                    elements: l.most_elements_on_a_tile(),
                    held: true,
                },
                None => ReduceShare::balanced(slice, tiles),
            };
            reduce_estimates(
                mode,
                share,
                k_splits,
                self.target.sync_cycles as u64,
                reduce_sends(per_tile * c_bytes, k_splits, share.held),
            )
        } else {
            Vec::new()
        };
        let reduce_cycles: u64 = reduce.iter().map(|r| r.cycles).sum();
        let reduce_exchange: u64 = reduce.iter().map(|r| r.exchange_cycles).sum();
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
            }),
            inputs: vec![a, b],
            output: c,
            estimated_cycles: cost - reduce_cycles,
            estimated_exchange_cycles: exch - reduce_exchange,
        });
        // The reduction, stage by stage, each stage's slices spread alike over all tiles.
        let mut x = c;
        let one = shares.unwrap_or_else(|| Layout::balanced(out_shape, cols, tiles as u32));
        for (i, r) in reduce.iter().enumerate() {
            let ranges = (0..r.runs).flat_map(|s| {
                one.pieces
                    .iter()
                    .map(move |p| (p.tile, s * slice + p.start, s * slice + p.end))
            });
            let layout = Layout::from_ranges(cols, ranges.collect::<Vec<_>>());
            let mut shape = out_shape.to_vec();
            let last = i + 1 == reduce.len();
            if !last {
                shape.insert(0, r.runs);
            }
            let value_name = if last {
                format!("{name}.partials")
            } else {
                format!("{name}.reduce{i}")
            };
            let y = self.add_value(value_name, partials, shape, None, layout);
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
        Ok(x)
    }
}

/// The cycles of one AMP round of `bm` rows on a tile: the weight load (`setzi`, `ampw`), the
/// launch (`setzi` of the state, `runall`), the slowest worker's pass over its share of the
/// rows and the `waitw`. With two rows a worker or more a block's rounds are one chain
/// (`Kernel::AmpChain`), and this is a round in its middle; [`amp_chain_ends_cycles`] adds
/// what its ends cost beyond.
fn amp_round_cycles(geo: &AmpGeometry, bm: u64) -> u64 {
    let slot = BARREL_SLOT_CYCLES as u64;
    let workers = WORKER_CONTEXTS as u64;
    let rows_per_worker = bm.div_ceil(workers) as u32;
    let weight_bytes = geo.weight_bytes() as u64;
    let worker = if amp_chains(bm as u32) {
        amp_chain_middle_slots(bm as u32)
    } else {
        kernels::amp_table_slots(rows_per_worker, true)
    };
    // The `waitw` issues while the workers still run (as `cost::estimate` counts it).
    slot * worker as u64 + 2 * slot + weight_bytes / AMP_WEIGHT_LOAD_BYTES_PER_CYCLE as u64 + slot
}

/// The cycles of a tile's `rounds` AMP rounds in `chains` chains through `groups` column
/// groups, its blocks having `rows.0` or `rows.1` rows (the floor and the ceiling of a row
/// split): the slower of the two, as a block just below two rows a worker does not chain.
fn rounds_cycles(
    geo: &AmpGeometry,
    rows: (u64, u64),
    rounds: u64,
    chains: u64,
    groups: u64,
) -> u64 {
    [rows.0, rows.1]
        .into_iter()
        .filter(|&bm| bm > 0)
        .map(|bm| {
            (rounds * amp_round_cycles(geo, bm))
                .saturating_add_signed(chains as i64 * amp_chain_ends_cycles(bm, groups))
        })
        .max()
        .unwrap_or(0)
}

/// The cycles a chain of AMP rounds over `bm` rows through `groups` column groups spends
/// beyond [`amp_round_cycles`] of each round: its first round finds the workers' entries and
/// stores no carried row, its last drains its own, and the first pass of every later group
/// loads no partials (0 when the rounds do not chain).
fn amp_chain_ends_cycles(bm: u64, groups: u64) -> i64 {
    let bm = bm as u32;
    BARREL_SLOT_CYCLES as i64
        * (amp_chain_ends_slots(bm)
            + groups.saturating_sub(1) as i64 * amp_chain_first_pass_slots(bm))
}

/// Bytes of the supervisor program per AMP round of a tile (as `emit` writes it): the weight
/// load (`setzi`, `ampw`), the launch (`setzi` of the state, `runall`) and the `waitw`.
const SUPERVISOR_BYTES_PER_ROUND: u64 = 4 * 5;

/// Bytes of vertex state per AMP round of a tile: the launch's table of six passes
/// (`AmpTableState`, 16 bytes a worker).
const STATE_BYTES_PER_ROUND: u64 = 16 * WORKER_CONTEXTS as u64;

/// The share of the support reserve (`plan::SUPPORT_RESERVE_BYTES`) a matmul's AMP rounds may
/// take with their code and vertex states; the rest is for the kernels, the exchange and host
/// tables and the runtime.
const ROUNDS_SUPPORT_ALLOWANCE: u64 = 64 * 1024;

/// Data memory a tile's `rounds` AMP rounds need beyond their allowance of the support reserve:
/// their vertex states and supervisor code.
fn rounds_support(rounds: u64) -> u64 {
    (rounds * (STATE_BYTES_PER_ROUND + SUPERVISOR_BYTES_PER_ROUND))
        .saturating_sub(ROUNDS_SUPPORT_ALLOWANCE)
}

/// Executable memory kept for the kernels, the trampolines and the rest of the supervisor
/// programs beside a matmul's AMP rounds.
const EXECUTABLE_RESERVE_BYTES: u64 = 48 * 1024;

/// The most AMP rounds one tile's supervisor program holds in executable memory.
fn amp_rounds_max(target: &ipu_target::Target) -> u64 {
    let executable = (target.executable_end - target.executable_base) as u64;
    executable.saturating_sub(EXECUTABLE_RESERVE_BYTES) / SUPERVISOR_BYTES_PER_ROUND
}

/// One matmul block: the output rows `m0..m1` and column groups `g0..g1` of batch `b`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    /// Tile.
    pub tile: u32,
    /// Batch index (over the output's leading dimensions).
    pub batch: usize,
    /// Rows.
    pub m0: usize,
    /// One past the last row.
    pub m1: usize,
    /// First column group.
    pub g0: usize,
    /// One past the last column group.
    pub g1: usize,
    /// The k split it computes (0 unless the matmul splits k over tiles).
    pub split: usize,
}

/// A matmul on the AMP with its blocks (the family's main device operation); the output is
/// the partials type.
#[derive(Debug, Clone, PartialEq)]
pub struct MatMul {
    /// AMP mode.
    pub mode: AmpMode,
    /// Blocks.
    pub blocks: Vec<Block>,
    /// Row splits.
    pub pm: usize,
    /// Column-group splits.
    pub pn: usize,
    /// Serial chunks of the k blocks: each has its own exchange and compute steps and
    /// stages only its share of the operands; accumulation carries across them.
    pub k_chunks: usize,
    /// Chunks of the k blocks on separate tiles (a 3-D split): block `split` takes the K
    /// blocks `kb * split / k_splits .. kb * (split + 1) / k_splits` and writes its own
    /// partials, slice `split` of the output `[k_splits, ..]`, which [`SumSplits`] then
    /// reduces. 1: no split.
    pub k_splits: usize,
    /// The operand the blocks on consecutive tiles share (the order of `blocks`).
    pub consecutive: Consecutive,
}

/// The sums of runs of a stacked value `[depth, ..]` (the partials of a k split; a device
/// operation): run `i` adds slices `depth * i / runs .. depth * (i + 1) / runs` in index
/// order; the output is `[runs, ..]`, or the slices' shape for one run. Each slice of the
/// output is spread over the tiles alike, and each tile adds its share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SumSplits {
    /// Runs (the depth after this stage).
    pub runs: usize,
}

/// A matmul mapping as costed: (cycles, exchange cycles, bytes per tile, pm, pn, serial k
/// chunks, k splits, the operand consecutive tiles share).
type Candidate = (u64, u64, u64, usize, usize, usize, usize, Consecutive);

/// Which operand the blocks on consecutive tiles share: blocks are dealt to tiles in
/// (split, batch, column block, row block) order with `Weights` (a run of `pm` blocks shares
/// its weights) or (split, batch, row block, column block) with `Rows` (a run of `pn` blocks
/// shares its rows of `a`). The shared operand's staging buffers form placement groups, so
/// one multicast row sends each run its copy, and whole pairs in a run take two such rows at
/// once (`Target::pair_tile`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Consecutive {
    /// Runs share weights (the default).
    Weights,
    /// Runs share rows of `a`.
    Rows,
}

impl Consecutive {
    /// The blocks sharing the operand in one run.
    fn run(self, pm: usize, pn: usize) -> usize {
        match self {
            Consecutive::Weights => pm,
            Consecutive::Rows => pn,
        }
    }
}

/// The bytes a tile receives to stage one block, at one tile's bandwidth: the operand it
/// shares with its run (`consecutive`) and the other alone. When the run is even every run
/// starts on an even tile and holds whole pairs, which take two multicasts of the shared
/// operand at once: at best half the time each, and counted at [`PAIR_SHARED_NUM`] /
/// [`PAIR_SHARED_DEN`] of it, what the exchange schedules reach. When it is odd every run has
/// a tile whose pair tile is outside it, which takes its run's operand alone.
fn staged_receive(
    a_bytes: u64,
    b_bytes: u64,
    pm: usize,
    pn: usize,
    consecutive: Consecutive,
) -> u64 {
    let (shared, alone) = match consecutive {
        Consecutive::Weights => (b_bytes, a_bytes),
        Consecutive::Rows => (a_bytes, b_bytes),
    };
    if consecutive.run(pm, pn).is_multiple_of(2) {
        alone + (shared * PAIR_SHARED_NUM).div_ceil(PAIR_SHARED_DEN)
    } else {
        alone + shared
    }
}

/// The share of a tile's time a pair-shared operand's bytes take in the staging exchange, as
/// the schedules reach it: the bound is 1/2 (two multicasts at once); the list schedules leave
/// gaps where multicasts to a run wait for one tile's lanes, and reached about 2/3 (the 2048³
/// f16-partials staging: receive bound 28,992 cycles, scheduled 35,200, of which the
/// unshared weights take 10,200; `IPU_LOG=info ipu build` logs each phase's
/// `receive_bound` beside its schedules' horizons). The multicasts-first schedule
/// (`exchange::multicasts_first`) comes nearer the bound (2048³ f32 partials: 19,488 cycles
/// for 37,504 of shared rows, 0.52), so this share now errs high.
pub(crate) const PAIR_SHARED_NUM: u64 = 2;
/// See [`PAIR_SHARED_NUM`].
pub(crate) const PAIR_SHARED_DEN: u64 = 3;

/// The bytes the busiest home of the operands sends to stage a split's blocks, given the most
/// bytes of `a` and of `b` a tile holds (`homes`, with how many batch entries of the output
/// read each of their elements): the operand a run of consecutive tiles shares goes to each run
/// in one multicast, the other to each of its blocks on tiles a run apart (one copy each);
/// with `Weights` every element of `a` goes to each of the `pn` column blocks of its rows,
/// with `Rows` every element of `b` to each of the `pm` row blocks of its columns. An exchange
/// phase ends no sooner than its busiest sender has sent, which for many blocks, or operands
/// held on few tiles (a row layout's), is later than its busiest receiver has received.
fn operand_sends(homes: &OperandHomes, pm: usize, pn: usize, consecutive: Consecutive) -> u64 {
    let (a, b) = (homes.a * homes.a_fanout, homes.b * homes.b_fanout);
    match consecutive {
        Consecutive::Weights => a * pn as u64 + b,
        Consecutive::Rows => a + b * pm as u64,
    }
}

/// What [`operand_sends`] needs of where the operands are.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OperandHomes {
    /// The most bytes of `a` one tile holds.
    pub a: u64,
    /// The output's batch entries reading each element of `a` (the batch when `a` is not
    /// batched).
    pub a_fanout: u64,
    /// The most bytes of `b` one tile holds.
    pub b: u64,
    /// As `a_fanout`, for `b`.
    pub b_fanout: u64,
}

/// A matmul's dimensions and the tiles it may use, for the 3-D candidates.
pub(crate) struct KSplitShape {
    pub mode: AmpMode,
    pub batch: usize,
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub tiles: usize,
    /// The most AMP rounds a tile's supervisor program holds ([`amp_rounds_max`]).
    pub rounds_max: u64,
    /// Where the operands are.
    pub homes: OperandHomes,
}

impl Planner<'_> {
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

/// A 3-D split of a matmul (rows × column groups × k chunks on separate tiles) as costed by
/// [`k_split_candidates`].
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
    /// The operand consecutive tiles share.
    pub consecutive: Consecutive,
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
    fn balanced(slice: usize, tiles: usize) -> ReduceShare {
        ReduceShare {
            elements: balanced_share(slice, tiles),
            held: false,
        }
    }

    /// The share of a tile when [`block_shares`] cuts blocks of `block` storage elements into
    /// `splits` shares.
    fn of_block(block: usize, splits: usize) -> ReduceShare {
        let units = block / crate::layout::PIECE_GRAIN;
        ReduceShare {
            elements: units.div_ceil(splits) * crate::layout::PIECE_GRAIN,
            held: true,
        }
    }
}

/// Bytes a product tile holding `c_bytes` of partials sends to the reduction: all of them, or
/// all but the share it sums itself.
fn reduce_sends(c_bytes: u64, splits: usize, held: bool) -> u64 {
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
fn block_shares(
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

/// Every 3-D split of `shape` (rows × column groups × k chunks on separate tiles, blocks
/// dealt to the tiles round-robin) whose busiest tile holds at most `tile_bytes_max` (weights
/// at most `interleaved_bytes_max`), costed by the same round and exchange model as
/// [`Planner::plan_matmul`]'s 2-D candidates plus the reduction of the `splits` partials of
/// every output element ([`reduce_estimates`]), cheapest first; at most `candidates_max`
/// are examined.
pub(crate) fn k_split_candidates(
    shape: &KSplitShape,
    tile_bytes_max: u64,
    interleaved_bytes_max: u64,
    sync_cycles: u64,
    candidates_max: usize,
) -> Vec<KSplitEstimate> {
    let KSplitShape {
        mode,
        batch,
        m,
        k,
        n,
        tiles,
        rounds_max,
        ..
    } = *shape;
    let geo = mode.geometry();
    let (kblk, cols) = (geo.k as usize, geo.columns as usize);
    let (in_bytes, out_bytes) = (geo.input_bytes as u64, geo.partial_bytes as u64);
    let groups = n.div_ceil(cols);
    let kb = k.div_ceil(kblk);
    let phase = EXCHANGE_PHASE_OVERHEAD_CYCLES as u64 + sync_cycles;
    let slice = batch * groups * m * cols;
    let mut found = Vec::new();
    let mut examined = 0;
    // The reduction's stages by share (many candidates share one), without the product tiles'
    // sends, which the first stage's exchange waits for when they exceed a tile's receipts:
    // (cycles, exchange cycles, bytes received).
    let mut stages_of: BTreeMap<(usize, ReduceShare), (u64, u64, u64)> = BTreeMap::new();
    for splits in 2..=kb.min(ipu_target::reduce::K_SPLITS_MAX).min(tiles) {
        for pm in 1..=m.min(tiles / splits) {
            for pn in 1..=groups.min(tiles / splits / pm) {
                examined += 1;
                if examined > candidates_max {
                    found.sort_by_key(|e: &KSplitEstimate| {
                        (e.cycles, e.tile_bytes, e.pm, e.pn, e.consecutive)
                    });
                    return found;
                }
                let blocks = batch * pm * pn * splits;
                let per_tile = blocks.div_ceil(tiles) as u64;
                let bm = m.div_ceil(pm) as u64;
                let bg = groups.div_ceil(pn) as u64;
                let kc = kb.div_ceil(splits) as u64;
                let a_bytes = kc * kblk as u64 * bm * in_bytes;
                let b_bytes = bg * kc * geo.weight_bytes() as u64;
                let c_bytes = bg * bm * (cols as u64 * out_bytes);
                // A tile's part in the reduction ([`block_shares`]): with one block a tile at
                // most, a share of its own block's (the largest block's, as the rows and
                // column groups divide).
                let share = if blocks <= tiles {
                    ReduceShare::of_block(bm as usize * bg as usize * cols, splits)
                } else {
                    ReduceShare::balanced(slice, tiles)
                };
                // The reduction's buffers on a tile: its share of every partial slice it does
                // not hold, of the sum and of the sum's other half (the stages after the first
                // hold less).
                let reduce_bytes = share.elements as u64
                    * (splits - usize::from(share.held) + 2) as u64
                    * out_bytes;
                // The products' buffers die before the reduction's are born; the partials
                // live through both.
                let states = rounds_support(per_tile * bg * kc);
                let mem = (per_tile
                    * (a_bytes + b_bytes + 2 * c_bytes + 4 * OVERREAD_BYTES as u64))
                    .max(per_tile * c_bytes + reduce_bytes)
                    + states;
                if mem > tile_bytes_max
                    || per_tile * b_bytes > interleaved_bytes_max
                    || per_tile * bg * kc > rounds_max
                {
                    continue;
                }
                let compute = rounds_cycles(
                    &geo,
                    ((m / pm) as u64, bm),
                    per_tile * bg * kc,
                    per_tile,
                    bg,
                );
                let bpc = EXCHANGE_BYTES_PER_CYCLE as u64;
                let (reduce_base, reduce_exchange, recv) =
                    *stages_of.entry((splits, share)).or_insert_with(|| {
                        let stages = reduce_estimates(mode, share, splits, sync_cycles, 0);
                        (
                            stages.iter().map(|r| r.cycles).sum(),
                            stages.iter().map(|r| r.exchange_cycles).sum(),
                            (splits - usize::from(share.held)) as u64
                                * share.elements as u64
                                * out_bytes,
                        )
                    });
                let sent = reduce_sends(per_tile * c_bytes, splits, share.held);
                let sends = sent.max(recv) / bpc - recv / bpc;
                let reduce = reduce_base + sends;
                for consecutive in [Consecutive::Weights, Consecutive::Rows] {
                    if consecutive == Consecutive::Rows && pn == 1 {
                        continue;
                    }
                    let moved = (per_tile * staged_receive(a_bytes, b_bytes, pm, pn, consecutive))
                        .max(operand_sends(&shape.homes, pm, pn, consecutive));
                    let exchange = moved / bpc + phase;
                    found.push(KSplitEstimate {
                        pm,
                        pn,
                        splits,
                        cycles: compute + exchange + reduce,
                        exchange_cycles: exchange + reduce_exchange + sends,
                        reduce_cycles: reduce,
                        tile_bytes: mem,
                        consecutive,
                    });
                }
            }
        }
    }
    found.sort_by_key(|e| (e.cycles, e.tile_bytes, e.pm, e.pn, e.consecutive));
    found
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

impl FamilyOp for SumSplits {
    fn lower(&self, lowerer: &mut Lowerer<'_>, index: usize) -> Result<(), CodegenError> {
        lowerer.lower_steps(index, |l, steps| {
            l.lower_sum_splits(index, self.runs, steps)
        })
    }
}

impl Lowerer<'_> {
    /// The placement group of the staging buffer on `tile` of the blocks staging `key`: the
    /// group of its kind, or a new one for the first of its kind or a second block of it on one
    /// tile.
    fn group_of(
        &mut self,
        groups: &mut BTreeMap<WeightKey, (u32, BTreeSet<u32>)>,
        key: WeightKey,
        tile: u32,
    ) -> u32 {
        let entry = groups.entry(key).or_insert((u32::MAX, BTreeSet::new()));
        if entry.0 == u32::MAX || !entry.1.insert(tile) {
            *entry = (self.next_group, BTreeSet::from([tile]));
            self.next_group += 1;
        }
        entry.0
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
                let start =
                    bl.split * slice + bl.batch * groups * m * cols + (g * m + bl.m0) * cols;
                let piece = c_layout
                    .pieces
                    .iter()
                    .find(|p| p.start == start && p.tile == bl.tile)
                    .ok_or_else(|| {
                        CodegenError::internal(format!("{name}: no output piece at {start}"))
                    })?;
                offsets.push(piece.local as u32 * geo.partial_bytes);
            }
            outputs.push((c_buf, t_buf, offsets));
        }
        let chunks = k_chunks.clamp(1, kb);
        let k_splits = k_splits.clamp(1, kb);
        for chunk in 0..chunks {
            let mut step_copies: Vec<Copy> = Vec::new();
            let mut step_tiles: BTreeMap<u32, Vec<SupOp>> = BTreeMap::new();
            let mut weight_groups: BTreeMap<WeightKey, (u32, BTreeSet<u32>)> = BTreeMap::new();
            // With `Rows`, the blocks sharing rows of `a` stage them at one address alike.
            let mut row_groups: BTreeMap<WeightKey, (u32, BTreeSet<u32>)> = BTreeMap::new();
            for (bl, (c_buf, t_buf, offsets)) in blocks.iter().zip(&outputs) {
                let (c_buf, t_buf) = (*c_buf, *t_buf);
                // The K blocks of this chunk (serial chunks carry the accumulation, so the
                // block's first round is K block 0 and its last `kb - 1`), or of the block's
                // k split (its own partials from zero).
                let (kb0, kb1, first, last) = if k_splits > 1 {
                    let (s0, s1) = (kb * bl.split / k_splits, kb * (bl.split + 1) / k_splits);
                    (s0, s1, s0, s1 - 1)
                } else {
                    (kb * chunk / chunks, kb * (chunk + 1) / chunks, 0, kb - 1)
                };
                let kc = kb1 - kb0;
                let kcp = kc * kblk;
                let (k_lo, k_hi) = (kb0 * kblk, (kb1 * kblk).min(k));
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
                if consecutive == Consecutive::Rows {
                    let key = (
                        if a_batch == 1 { 0 } else { bl.batch },
                        bl.m0,
                        bl.m1,
                        bl.split,
                    );
                    let g = self.group_of(&mut row_groups, key, bl.tile);
                    self.prog.buffers[a_st.0 as usize].group = Some(g);
                }
                let mut cp = self.gather(a, bl.tile, kblk, &want, a_st);
                // B staging (weights): [bg][kcp][cols], in interleaved memory.
                let b_bytes = (bg * kcp * cols) as u32 * geo.input_bytes;
                let b_st = self.prog.buffer(
                    bl.tile,
                    b_bytes,
                    Region::Interleaved,
                    format!("stage:{name}.w"),
                );
                // Blocks with the same weights hold them at the same address (a placement
                // group), so the exchange can multicast them.
                let key = (
                    if b_batch == 1 { 0 } else { bl.batch },
                    bl.g0,
                    bl.g1,
                    bl.split,
                );
                let g = self.group_of(&mut weight_groups, key, bl.tile);
                self.prog.buffers[b_st.0 as usize].group = Some(g);
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
                        let w_off = ((g - bl.g0) * kcp + (kk - kb0) * kblk) as u32
                            * geo.columns
                            * geo.input_bytes;
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
                    tiles: step_tiles,
                    estimated_cycles,
                });
            }
        }
        Ok(())
    }

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
    use super::*;

    /// The cheapest 3-D split of the transformer shapes on 1472 tiles, with the whole tile as
    /// the limit less the support reserve (`cargo test -p ipu-codegen --lib k_split --
    /// --nocapture` prints them).
    #[test]
    fn k_split_candidates_of_the_transformer_shapes() {
        let target = ipu_target::Target::gc200();
        let tile = target.memory_bytes() as u64 - crate::plan::SUPPORT_RESERVE_BYTES;
        for (mode, m, k, n) in [
            (AmpMode::F16F32, 2048, 2048, 2048),
            (AmpMode::F16F16, 2048, 2048, 2048),
            (AmpMode::F32F32, 2048, 2048, 2048),
            (AmpMode::F16F32, 512, 768, 3072),
            (AmpMode::F16F32, 512, 3072, 768),
            (AmpMode::F16F32, 128, 768, 768),
            (AmpMode::F16F32, 4096, 4096, 4096),
        ] {
            let shape = KSplitShape {
                mode,
                batch: 1,
                m,
                k,
                n,
                tiles: 1472,
                rounds_max: amp_rounds_max(&target),
                homes: OperandHomes {
                    a: (m * k * 2).div_ceil(1472) as u64,
                    a_fanout: 1,
                    b: (k * n * 2).div_ceil(1472) as u64,
                    b_fanout: 1,
                },
            };
            let found = k_split_candidates(
                &shape,
                tile,
                target.interleaved_bytes() as u64,
                target.sync_cycles as u64,
                MATMUL_CANDIDATES_MAX,
            );
            println!("{mode:?} {m}x{k}x{n}: {:?}", found.first());
            for e in &found {
                assert!(e.splits >= 2 && e.pm * e.pn * e.splits <= 1472);
                assert!(e.tile_bytes <= tile && e.reduce_cycles < e.cycles);
            }
            assert!(found.windows(2).all(|w| w[0].cycles <= w[1].cycles));
        }
    }

    /// The operand a run of consecutive tiles shares costs less where the run holds whole
    /// pairs (an even run), and is sent once per run rather than once per block.
    #[test]
    fn the_shared_operand_is_cheaper_on_whole_pairs_and_sent_once_a_run() {
        let (a, b) = (3000u64, 900u64);
        let shared = (a * PAIR_SHARED_NUM).div_ceil(PAIR_SHARED_DEN);
        assert_eq!(staged_receive(a, b, 7, 26, Consecutive::Rows), b + shared);
        assert_eq!(staged_receive(a, b, 7, 25, Consecutive::Rows), a + b);
        assert_eq!(
            staged_receive(a, b, 8, 25, Consecutive::Weights),
            a + (b * 2).div_ceil(3)
        );
        assert_eq!(staged_receive(a, b, 7, 26, Consecutive::Weights), a + b);
        let homes = OperandHomes {
            a: 10,
            a_fanout: 1,
            b: 100,
            b_fanout: 2,
        };
        assert_eq!(
            operand_sends(&homes, 7, 26, Consecutive::Weights),
            10 * 26 + 200
        );
        assert_eq!(
            operand_sends(&homes, 7, 26, Consecutive::Rows),
            10 + 200 * 7
        );
        // Both orders are costed for every split but pn = 1, where they agree.
        let target = ipu_target::Target::gc200();
        let shape = KSplitShape {
            mode: AmpMode::F16F32,
            batch: 1,
            m: 2048,
            k: 2048,
            n: 2048,
            tiles: 1472,
            rounds_max: amp_rounds_max(&target),
            homes: OperandHomes {
                a: (2048 * 2048 * 2u64).div_ceil(1472),
                a_fanout: 1,
                b: (2048 * 2048 * 2u64).div_ceil(1472),
                b_fanout: 1,
            },
        };
        let tile = target.memory_bytes() as u64 - crate::plan::SUPPORT_RESERVE_BYTES;
        let found = k_split_candidates(
            &shape,
            tile,
            target.interleaved_bytes() as u64,
            target.sync_cycles as u64,
            MATMUL_CANDIDATES_MAX,
        );
        assert!(
            found
                .iter()
                .all(|e| e.pn > 1 || e.consecutive == Consecutive::Weights)
        );
        assert!(found.iter().any(|e| e.consecutive == Consecutive::Rows));
    }

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
