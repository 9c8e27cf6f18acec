//! The supervisor's cycle model: what one tile's list of supervisor operations costs, from
//! the kernels' slot models and the barrel-scheduling rules. Planning (modelled candidates),
//! lowering (each step's estimate) and the final costing of the placed program share it.

use std::collections::BTreeMap;

use ipu_target::{
    AMP_WEIGHT_LOAD_BYTES_PER_CYCLE, EXCHANGE_PHASE_OVERHEAD_CYCLES, Target, WORKER_CONTEXTS,
};

use crate::exchange::Scheduled;
use crate::program::{Step, SupOp, TileProgram};

/// Worker contexts a tile's launches share.
const WORKERS: u32 = WORKER_CONTEXTS;

/// The cycle estimate of one tile's supervisor work: per wave (between `waitw`s) the slowest
/// worker, plus one barrel slot per supervisor instruction. A launch takes the worker context
/// that frees first; when all six are busy the supervisor waits for it, as `run` does.
pub fn estimate(ops: &[SupOp]) -> u64 {
    estimate_waves(ops).iter().map(|w| w.1).sum()
}

/// [`estimate`] wave by wave: each wave's last operation (its `waitw`; the last wave may end
/// without one, at `ops.len()`) and its cycles.
pub fn estimate_waves(ops: &[SupOp]) -> Vec<(usize, u64)> {
    let mut waves = Vec::new();
    // A weight load before any `ampcfg` of these operations is costed at the largest block.
    const AMP_WEIGHT_BYTES_MAX: u32 = 512;
    let slot = ipu_target::BARREL_SLOT_CYCLES as u64;
    let mut sup = 0u64;
    let mut free = [0u64; WORKERS as usize];
    let mut entry = None;
    let mut amp_mode = None;
    let launch = |sup: &mut u64, free: &mut [u64; WORKERS as usize], slots: u32| {
        *sup += slot;
        let w = (0..free.len())
            .min_by_key(|&w| (free[w], w))
            .expect("workers");
        *sup = (*sup).max(free[w]);
        free[w] = *sup + slots as u64 * slot;
    };
    // The next `ampw`'s address and launch's state already set (`SupOp::set_up_ahead`).
    let (mut ampw_set, mut launch_set) = (false, false);
    for (i, op) in ops.iter().enumerate() {
        match op {
            SupOp::RunAll(_, _, slots) if std::mem::take(&mut launch_set) => {
                sup = sup.max(free.iter().copied().max().unwrap_or(0));
                free = [sup + *slots as u64 * slot; WORKERS as usize];
                sup += slot;
            }
            SupOp::Run(k, _, slots) => {
                // `setzi` of the entry only when the kernel changes (see emit::supervisor_code).
                sup += if entry == Some(*k) { slot } else { 2 * slot };
                entry = Some(*k);
                launch(&mut sup, &mut free, *slots);
            }
            SupOp::RunAll(k, _, slots) => {
                // `setzi` of the state (and of the entry), then `runall`, which waits for every
                // worker and starts all six at the start of its slot (as the device does).
                sup += if entry == Some(*k) { slot } else { 2 * slot };
                entry = Some(*k);
                sup = sup.max(free.iter().copied().max().unwrap_or(0));
                free = [sup + *slots as u64 * slot; WORKERS as usize];
                sup += slot;
            }
            SupOp::WaitW => {
                if let Some((_, _, k)) = SupOp::set_up_ahead(ops, i) {
                    // The next round's weight address, entry and state, while workers run.
                    sup += if entry == Some(k) { 2 * slot } else { 3 * slot };
                    entry = Some(k);
                    (ampw_set, launch_set) = (true, true);
                }
                sup += slot;
                waves.push((i, sup.max(free.iter().copied().max().unwrap_or(0))));
                sup = 0;
                free = [0; WORKERS as usize];
            }
            SupOp::AmpCfg(mode) => {
                amp_mode = Some(*mode);
                sup += slot;
            }
            // `setzi` of the address, then `ampw`: a slot and the mode's weight block at the
            // AMP's load rate.
            SupOp::AmpW(..) => {
                let bytes =
                    amp_mode.map_or(AMP_WEIGHT_BYTES_MAX, |m| m.geometry().weight_bytes()) as u64;
                let setzi = if std::mem::take(&mut ampw_set) {
                    0
                } else {
                    slot
                };
                sup += setzi + slot + bytes / AMP_WEIGHT_LOAD_BYTES_PER_CYCLE as u64;
            }
            _ => sup += slot,
        }
    }
    let rest = sup.max(free.iter().copied().max().unwrap_or(0));
    if rest > 0 {
        waves.push((ops.len(), rest));
    }
    waves
}

/// [`estimate`] by the kernel each wave launches (its first launch's kind, as `FlashSoftmax`
/// or `AmpChain`; `supervisor` for a wave without one): where a tile's compute cycles go.
pub fn estimate_by_kernel(ops: &[SupOp]) -> BTreeMap<String, u64> {
    let mut parts = BTreeMap::new();
    let mut start = 0;
    for (end, cycles) in estimate_waves(ops) {
        let kernel = ops[start..(end + 1).min(ops.len())]
            .iter()
            .find_map(|op| match op {
                SupOp::Run(k, ..) | SupOp::RunAll(k, ..) => Some(k),
                _ => None,
            });
        let name = kernel.map_or_else(
            || "supervisor".to_string(),
            |k| {
                let debug = format!("{k:?}");
                debug
                    .split([' ', '{', '('])
                    .next()
                    .unwrap_or_default()
                    .to_string()
            },
        );
        *parts.entry(name).or_insert(0) += cycles;
        start = end + 1;
    }
    parts
}

/// The cost of the placed program and its exchange part: each compute step's slowest tile and
/// a sync, each exchange phase's scheduled horizon and overhead.
/// Adds to every vector-operation launch the issue slots its loads lose to bank conflicts at
/// the placed `addresses` (`ipu_kernels::binary_conflict_slots`): what storage placement
/// could not keep apart (two streams of one buffer), the device charges and so does the
/// final costing. The other kernels that load two streams in one issue have theirs in
/// different buffers, which placement keeps in different memory elements.
pub fn charge_bank_conflicts(program: &mut TileProgram, addresses: &[u32], target: &Target) {
    let at = |l: (ipu_kernels::BufferId, u32)| addresses[l.0.0 as usize].wrapping_add(l.1);
    for (i, step) in program.steps.iter_mut().enumerate() {
        // A repeated step shares its first instance's work, charged there.
        if program.same_as.contains_key(&i) {
            continue;
        }
        let Step::Compute { tiles, .. } = step else {
            continue;
        };
        for op in std::sync::Arc::make_mut(tiles).values_mut().flatten() {
            if let SupOp::Run(
                ipu_kernels::Kernel::Binary { op, .. },
                ipu_kernels::state::State::Binary(st),
                slots,
            ) = op
            {
                *slots +=
                    ipu_kernels::binary_conflict_slots(target, *op, at(st.a), at(st.b), st.vectors);
            }
        }
    }
    let repeats: Vec<(usize, usize)> = program.same_as.iter().map(|(&j, &i)| (j, i)).collect();
    for (j, i) in repeats {
        program.steps[j] = program.steps[i].clone();
    }
}

/// Each step's cycles in the placed program: a compute step its slowest tile's estimate (the
/// tiles costed in parallel) and the sync, an exchange step its schedule's horizon and the
/// phase overhead, a host step none.
pub fn step_cycles(
    program: &TileProgram,
    exchanges: &BTreeMap<usize, Scheduled>,
    target: &Target,
) -> Vec<Option<u64>> {
    use rayon::prelude::*;
    program
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| match s {
            Step::Compute { tiles, .. } => Some(
                tiles
                    .par_iter()
                    .map(|(_, o)| estimate(o))
                    .max()
                    .unwrap_or(0)
                    + target.sync_cycles as u64,
            ),
            Step::Exchange { .. } => exchanges
                .get(&i)
                .map(|x| x.horizon as u64 + EXCHANGE_PHASE_OVERHEAD_CYCLES as u64),
            Step::Host { .. } => None,
        })
        .collect()
}

/// The placed program's cycles and its exchanges' share, from [`step_cycles`].
pub fn final_cycles(program: &TileProgram, step_cycles: &[Option<u64>]) -> (u64, u64) {
    let mut total = 0u64;
    let mut exchange = 0u64;
    for (s, c) in program.steps.iter().zip(step_cycles) {
        let c = c.unwrap_or(0);
        total += c;
        if matches!(s, Step::Exchange { .. }) {
            exchange += c;
        }
    }
    (total, exchange)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipu_kernels::state::BinaryState;
    use ipu_kernels::{BinOp, BufferId, Elem, Kernel};

    /// A compute step of one vector add of `vectors` vectors with its operands at offsets
    /// `a` and `b` of buffer 0; returns the launch's slots after charging conflicts with
    /// buffer 0 at `base`.
    fn charged(base: u32, a: u32, b: u32, vectors: u32) -> u32 {
        let k = Kernel::Binary {
            ty: Elem::F32,
            op: BinOp::Add,
        };
        let st = BinaryState {
            a: (BufferId(0), a),
            b: (BufferId(0), b),
            out: (BufferId(1), 0),
            vectors,
        };
        let slots = ipu_kernels::binary_slots(Elem::F32, BinOp::Add, vectors);
        let mut p = TileProgram::default();
        p.steps.push(Step::Compute {
            name: "add".into(),
            tiles: BTreeMap::from([(0, vec![SupOp::Run(k, st.into(), slots)])]).into(),
            estimated_cycles: 0,
        });
        charge_bank_conflicts(&mut p, &[base, 0x9_0000], &Target::gc200());
        let Step::Compute { tiles, .. } = &p.steps[0] else {
            unreachable!()
        };
        let SupOp::Run(_, _, s) = tiles[&0][0] else {
            unreachable!()
        };
        s - slots
    }

    #[test]
    fn vector_operations_are_charged_the_conflicts_of_their_placed_operands() {
        // Two slices 256 bytes apart in one interleaved pair: every load pair (the loop loads
        // one vector ahead) conflicts.
        assert_eq!(charged(0x8_0000, 0, 256, 32), 33);
        // 8 bytes apart: the pair's two elements, never.
        assert_eq!(charged(0x8_0000, 0, 264, 32), 0);
        // Standard memory: until the second operand crosses into the next bank (16 loads),
        // and again for the read ahead once the first has crossed too.
        assert_eq!(charged(0x5_0000, 0x3F00, 0x3F80, 32), 17);
    }
}
