//! A matmul's candidate mappings: its 2-D splits of rows and column groups, each with the
//! serial k chunks that make it fit ([`split_candidates`]), and its 3-D splits, with chunks of
//! k on separate tiles ([`k_split_candidates`]), each costed by the model of [`super::cost`]
//! (and the reduction's, [`super::reduce`]).

use std::collections::BTreeMap;

use ipu_target::{AmpMode, EXCHANGE_BYTES_PER_CYCLE, EXCHANGE_PHASE_OVERHEAD_CYCLES};

use super::blocks::Consecutive;
use super::cost::{OperandHomes, operand_sends, rounds_cycles, rounds_support, staged_receive};
use super::reduce::{ReduceShare, reduce_estimates, reduce_sends};
use crate::plan::SearchState;
use ipu_kernels::OVERREAD_BYTES;

/// A matmul split into k chunks must fit with `1 / CHUNKED_HEADROOM_DIVISOR` of its bytes to
/// spare (12.5 %): the memory model sees neither fragmentation nor the real support area, and
/// an unsplit mapping that needs chunking is already close to the limit.
pub const CHUNKED_HEADROOM_DIVISOR: u64 = 8;
/// Most serial k chunks a matmul is split into (each costs an exchange phase and a sync).
pub const K_CHUNKS_MAX: u64 = 64;
/// Bound on matmul candidates examined per operation.
pub const MATMUL_CANDIDATES_MAX: usize = 200_000;

/// A matmul mapping as costed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Candidate {
    /// Cycles: the products, the staging exchange and, for a 3-D split, the reduction.
    pub cycles: u64,
    /// Of which exchange.
    pub exchange_cycles: u64,
    /// Bytes on the busiest tile.
    pub tile_bytes: u64,
    /// Row blocks.
    pub pm: usize,
    /// Column-group blocks.
    pub pn: usize,
    /// Serial chunks of k (1 for a 3-D split).
    pub k_chunks: usize,
    /// Chunks of k on separate tiles (1: a 2-D split).
    pub k_splits: usize,
    /// The operand consecutive tiles share.
    pub consecutive: Consecutive,
    /// Whether the batch is folded into the rows ([`super::MatMul::folded`]).
    pub folded: bool,
}

impl Candidate {
    /// The order candidates are ranked in: the cheapest first, then the fewest bytes a tile,
    /// then by split and order (a stable sort keeps the order of enumeration among equals).
    pub(super) fn rank(&self) -> (u64, u64, usize, usize, usize, Consecutive, bool) {
        (
            self.cycles,
            self.tile_bytes,
            self.pm,
            self.pn,
            self.k_splits,
            self.consecutive,
            self.folded,
        )
    }

    /// Its description among the finalists (and in a chosen finalist, which must match it).
    pub(super) fn mapping(&self, mode: AmpMode) -> String {
        let (pm, pn) = (self.pm, self.pn);
        let mut mapping = if self.k_splits > 1 {
            let splits = self.k_splits;
            format!("matmul rows/{pm} column-groups/{pn} k-splits/{splits} mode={mode:?}")
        } else {
            let chunks = self.k_chunks;
            format!("matmul rows/{pm} column-groups/{pn} k-chunks/{chunks} mode={mode:?}")
        };
        if self.consecutive == Consecutive::Rows {
            mapping.push_str(" consecutive=rows");
        }
        if self.folded {
            mapping.push_str(" batch=rows");
        }
        mapping
    }

    /// The tiles it uses of `tiles` for `batch` entries: all of them for a 3-D split, else one
    /// a block at most.
    pub(super) fn tiles_used(&self, batch: usize, tiles: usize) -> usize {
        if self.k_splits > 1 {
            tiles
        } else if self.folded {
            (self.pm * self.pn).min(tiles)
        } else {
            (batch * self.pm * self.pn).min(tiles)
        }
    }
}

/// A matmul's dimensions and the tiles it may use, for its candidates.
pub(crate) struct MatmulShape {
    /// AMP mode.
    pub mode: AmpMode,
    /// Batch entries of the output (its leading dimensions).
    pub batch: usize,
    /// Rows of the output.
    pub m: usize,
    /// Columns of `a`, rows of `b`.
    pub k: usize,
    /// Columns of the output.
    pub n: usize,
    /// Tiles it may use.
    pub tiles: usize,
    /// The most AMP rounds a tile's supervisor program holds ([`amp_rounds_max`]).
    pub rounds_max: u64,
    /// Where the operands are.
    pub homes: OperandHomes,
    /// Whether the batch may be folded into the rows (the right operand has no batch).
    pub foldable: bool,
}

impl MatmulShape {
    /// The shape with the batch folded into the rows, when it may be and has a batch: one
    /// matrix of `batch × m` rows, whose operands each block reads once.
    pub(super) fn folded(&self) -> Option<MatmulShape> {
        (self.foldable && self.batch > 1).then(|| MatmulShape {
            batch: 1,
            m: self.batch * self.m,
            homes: OperandHomes {
                a_fanout: 1,
                b_fanout: 1,
                ..self.homes
            },
            foldable: false,
            ..*self
        })
    }
}

/// The memory a matmul's mapping may take on a tile.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Room {
    /// Bytes of data memory a tile has.
    pub memory: u64,
    /// Bytes of interleaved memory a tile has (the weights').
    pub interleaved: u64,
    /// Bytes kept free for code and support data.
    pub reserve: u64,
    /// Bytes other live values hold on the busiest tile meanwhile.
    pub other_live: u64,
    /// The per-tile budget placement gave the operation, if any.
    pub budget: Option<u64>,
}

impl Misses {
    /// What two enumerations saw together.
    pub(super) fn merge(&mut self, other: &Misses) {
        self.examined += other.examined;
        let worst = |c: &Closest| c.over_total.max(c.over_interleaved);
        if let Some(c) = other.closest
            && self.closest.is_none_or(|mine| worst(&c) < worst(&mine))
        {
            self.closest = Some(c);
        }
        if let Some(r) = other.fewest_rounds
            && self.fewest_rounds.is_none_or(|mine| r.rounds < mine.rounds)
        {
            self.fewest_rounds = Some(r);
        }
    }
}

impl Room {
    /// The most bytes a tile of a mapping may hold: what the reserve and the other live
    /// values leave, within the budget.
    pub(super) fn tile_bytes_max(&self) -> u64 {
        self.memory
            .saturating_sub(self.reserve + self.other_live)
            .min(self.budget.unwrap_or(u64::MAX))
    }
}

/// The 2-D split that comes closest to fitting, and by how much it misses.
#[derive(Debug, Clone, Copy)]
pub(super) struct Closest {
    /// Bytes over in data memory (or over the budget).
    pub over_total: u64,
    /// Bytes over in interleaved memory.
    pub over_interleaved: u64,
    /// Bytes a tile would hold.
    pub tile_bytes: u64,
    /// Row blocks.
    pub pm: usize,
    /// Column-group blocks.
    pub pn: usize,
}

/// A 2-D split that fits memory but whose supervisor program would not fit executable
/// memory: its AMP rounds a tile.
#[derive(Debug, Clone, Copy)]
pub(super) struct TooManyRounds {
    /// AMP rounds on the busiest tile.
    pub rounds: u64,
    /// Row blocks.
    pub pm: usize,
    /// Column-group blocks.
    pub pn: usize,
}

/// What the enumeration of 2-D splits saw besides its candidates, for the refusal when none
/// fits.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Misses {
    /// Splits examined.
    pub examined: usize,
    /// The split that misses fitting memory by the least.
    pub closest: Option<Closest>,
    /// Of the splits that fit memory, the one with the fewest AMP rounds a tile beyond
    /// `rounds_max`.
    pub fewest_rounds: Option<TooManyRounds>,
}

/// Every `(pm, pn)` split of `shape`'s rows and column groups (blocks dealt to the tiles
/// round-robin) that fits `room`, each with the fewest serial k chunks that make it fit
/// (powers of two up to [`K_CHUNKS_MAX`]; each chunk adds an exchange phase and a sync of
/// `sync_cycles`), costed in both orders of its blocks (one when `pn` is 1, where they
/// agree). At most [`MATMUL_CANDIDATES_MAX`] splits are examined, and none once the
/// `search` is spent and a candidate is found.
pub(super) fn split_candidates(
    shape: &MatmulShape,
    room: &Room,
    sync_cycles: u64,
    search: &mut SearchState,
) -> (Vec<Candidate>, Misses) {
    let MatmulShape {
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
    let kp = kb * kblk;
    let mut candidates = Vec::new();
    let mut misses = Misses::default();
    'outer: for pm in 1..=m.min(tiles) {
        for pn in 1..=groups.min(tiles) {
            misses.examined += 1;
            if misses.examined > MATMUL_CANDIDATES_MAX {
                break 'outer;
            }
            if search.spend() && !candidates.is_empty() {
                break 'outer;
            }
            let blocks = batch * pm * pn;
            let per_tile = blocks.div_ceil(tiles) as u64;
            let bm = m.div_ceil(pm) as u64;
            let bg = groups.div_ceil(pn) as u64;
            let a_bytes = kp as u64 * bm * in_bytes;
            let b_bytes = bg * kp as u64 * (cols as u64 * in_bytes);
            let c_bytes = bg * bm * (cols as u64 * out_bytes);
            let pingpong = pingpong_bytes(m / pm, c_bytes);
            // Serial k chunks when memory demands: the fewest that fit (each chunk adds an
            // exchange phase and a sync, and stages only its share of the operands).
            let fits = |chunks: u64| {
                let share = (kb as u64).div_ceil(chunks);
                let (a, b) = (a_bytes / kb as u64 * share, b_bytes / kb as u64 * share);
                let states = rounds_support(per_tile * bg * kb as u64);
                let mem =
                    per_tile * (a + b + c_bytes + pingpong + 4 * OVERREAD_BYTES as u64) + states;
                // Once split, keep headroom for what this model does not see (support
                // data beyond the reserve, fragmentation between live buffers).
                let need = if chunks > 1 {
                    mem + mem / CHUNKED_HEADROOM_DIVISOR
                } else {
                    mem
                };
                let over_total = (need + room.reserve + room.other_live)
                    .saturating_sub(room.memory)
                    .max(need.saturating_sub(room.budget.unwrap_or(u64::MAX)));
                let over_interleaved = (per_tile * b).saturating_sub(room.interleaved);
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
                if (misses.closest).is_none_or(|c| worst < c.over_total.max(c.over_interleaved)) {
                    misses.closest = Some(Closest {
                        over_total,
                        over_interleaved,
                        tile_bytes: mem,
                        pm,
                        pn,
                    });
                }
                continue;
            }
            let rounds = per_tile * bg * kb as u64;
            if rounds > rounds_max {
                // Its supervisor program would not fit executable memory.
                if (misses.fewest_rounds).is_none_or(|r| rounds < r.rounds) {
                    misses.fewest_rounds = Some(TooManyRounds { rounds, pm, pn });
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
                    .max(operand_sends(&shape.homes, pm, pn, consecutive));
                let exchange = moved / EXCHANGE_BYTES_PER_CYCLE as u64
                    + chunks * (EXCHANGE_PHASE_OVERHEAD_CYCLES as u64 + sync_cycles);
                candidates.push(Candidate {
                    cycles: compute + exchange,
                    exchange_cycles: exchange,
                    tile_bytes: mem,
                    pm,
                    pn,
                    k_chunks: chunks as usize,
                    k_splits: 1,
                    consecutive,
                    folded: false,
                });
            }
        }
    }
    (candidates, misses)
}

/// The ping-pong partner of a block's `c_bytes` of partials: none when its rows chain (at
/// least `rows`, the fewer of a split's two block heights), whose rounds accumulate in place
/// (`ipu_kernels::Kernel::AmpChain`), else as large as they.
fn pingpong_bytes(rows: usize, c_bytes: u64) -> u64 {
    if crate::lower::amp_chains(rows as u32) {
        0
    } else {
        c_bytes
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

/// Every 3-D split of `shape` (rows × column groups × k chunks on separate tiles, blocks
/// dealt to the tiles round-robin) whose busiest tile holds at most `tile_bytes_max` (weights
/// at most `interleaved_bytes_max`), costed by the same round and exchange model as
/// [`split_candidates`] plus the reduction of the `splits` partials of
/// every output element ([`reduce_estimates`]), cheapest first; at most `candidates_max`
/// are examined.
pub(crate) fn k_split_candidates(
    shape: &MatmulShape,
    tile_bytes_max: u64,
    interleaved_bytes_max: u64,
    sync_cycles: u64,
    candidates_max: usize,
) -> Vec<KSplitEstimate> {
    let MatmulShape {
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
                let pingpong = pingpong_bytes(m / pm, c_bytes);
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
                    * (a_bytes + b_bytes + c_bytes + pingpong + 4 * OVERREAD_BYTES as u64))
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

#[cfg(test)]
mod tests {
    use super::super::cost::{PAIR_SHARED_DEN, PAIR_SHARED_NUM, amp_rounds_max};
    use super::*;
    use crate::plan::SUPPORT_RESERVE_BYTES;

    /// The cheapest 3-D split of the transformer shapes on 1472 tiles, with the whole tile as
    /// the limit less the support reserve (`cargo test -p ipu-codegen --lib k_split --
    /// --nocapture` prints them).
    #[test]
    fn k_split_candidates_of_the_transformer_shapes() {
        let target = ipu_target::Target::gc200();
        let tile = target.memory_bytes() as u64 - SUPPORT_RESERVE_BYTES;
        for (mode, m, k, n) in [
            (AmpMode::F16F32, 2048, 2048, 2048),
            (AmpMode::F16F16, 2048, 2048, 2048),
            (AmpMode::F32F32, 2048, 2048, 2048),
            (AmpMode::F16F32, 512, 768, 3072),
            (AmpMode::F16F32, 512, 3072, 768),
            (AmpMode::F16F32, 128, 768, 768),
            (AmpMode::F16F32, 4096, 4096, 4096),
        ] {
            let shape = MatmulShape {
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
                foldable: false,
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
        let shape = MatmulShape {
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
            foldable: false,
        };
        let tile = target.memory_bytes() as u64 - SUPPORT_RESERVE_BYTES;
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
}
