//! The cost model of a matmul's mapping: the cycles of its AMP rounds (chained or not), the
//! memory its rounds' vertex states and supervisor code take, the most rounds a tile's
//! executable memory holds, and the bytes its staging exchange receives and sends.

use ipu_target::{
    AMP_WEIGHT_LOAD_BYTES_PER_CYCLE, AmpGeometry, BARREL_SLOT_CYCLES, WORKER_CONTEXTS,
};

use super::blocks::Consecutive;
use crate::lower::{
    amp_chain_ends_slots, amp_chain_first_pass_slots, amp_chain_middle_slots, amp_chains,
};
use ipu_kernels as kernels;

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
pub(super) fn rounds_cycles(
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
pub(super) const SUPERVISOR_BYTES_PER_ROUND: u64 = 4 * 5;

/// Bytes of vertex state per AMP round of a tile: the launch's table of six passes
/// (`AmpTableState`, 16 bytes a worker).
const STATE_BYTES_PER_ROUND: u64 = 16 * WORKER_CONTEXTS as u64;

/// The share of the support reserve (`plan::SUPPORT_RESERVE_BYTES`) a matmul's AMP rounds may
/// take with their code and vertex states; the rest is for the kernels, the exchange and host
/// tables and the runtime.
const ROUNDS_SUPPORT_ALLOWANCE: u64 = 64 * 1024;

/// Data memory a tile's `rounds` AMP rounds need beyond their allowance of the support reserve:
/// their vertex states and supervisor code.
pub(super) fn rounds_support(rounds: u64) -> u64 {
    (rounds * (STATE_BYTES_PER_ROUND + SUPERVISOR_BYTES_PER_ROUND))
        .saturating_sub(ROUNDS_SUPPORT_ALLOWANCE)
}

/// Executable memory kept for the kernels, the trampolines and the rest of the supervisor
/// programs beside a matmul's AMP rounds.
pub(super) const EXECUTABLE_RESERVE_BYTES: u64 = 48 * 1024;

/// The most AMP rounds one tile's supervisor program holds in executable memory.
pub(super) fn amp_rounds_max(target: &ipu_target::Target) -> u64 {
    let executable = (target.executable_end - target.executable_base) as u64;
    executable.saturating_sub(EXECUTABLE_RESERVE_BYTES) / SUPERVISOR_BYTES_PER_ROUND
}

/// The bytes a tile receives to stage one block, at one tile's bandwidth: the operand it
/// shares with its run (`consecutive`) and the other alone. When the run is even every run
/// starts on an even tile and holds whole pairs, which take two multicasts of the shared
/// operand at once: at best half the time each, and counted at [`PAIR_SHARED_NUM`] /
/// [`PAIR_SHARED_DEN`] of it, what the exchange schedules reach. When it is odd every run has
/// a tile whose pair tile is outside it, which takes its run's operand alone.
pub(super) fn staged_receive(
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
pub(super) fn operand_sends(
    homes: &OperandHomes,
    pm: usize,
    pn: usize,
    consecutive: Consecutive,
) -> u64 {
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
