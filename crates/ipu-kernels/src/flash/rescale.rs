//! [`flash_rescale`]: a partial output rescaled by its rows' factors between sub-blocks.

use ipu_isa::{AluOp, FBinOp, FType, Instr};

use super::*;
use crate::state::*;
use crate::types::Elem;

/// Rescales the partial output of rows by their `alpha` (the third statistics word, which
/// [`flash_softmax`]'s running form stores as a pair in the third and fourth):
/// `O[g][r] *= alpha_r` for the `groups` groups of 32 bytes of `p_ty`.
///
/// State: O (row 0, group 0), statistics (row 0), rows, groups, group stride (bytes).
pub fn flash_rescale(c: &mut Code, p_ty: Elem) {
    if p_ty == Elem::F32 {
        flash_rescale_f32(c);
        return;
    }
    load_state(c, FlashRescaleState::WORDS);
    let (o, st, rows, groups, stride) = (m(1), m(2), m(3), m(4), m(5));
    let (po, g) = (m(6), m(7));
    let end = c.label();
    loop_counts(c, &[rows, groups], end);
    c.op(alu_imm(AluOp::Sub, stride, stride, GROUP_ROW_BYTES as i16));
    let row = c.label();
    c.bind(row);
    c.op(ld32a(a(0), st, 8));
    c.op(bcast(8, 0));
    c.op(mov_m(po, o));
    c.op(mov_m(g, groups));
    let group = c.label();
    c.bind(group);
    for _ in 0..4 {
        match p_ty {
            Elem::F32 => {
                c.op(ld64_at(4, po, 0));
                c.op(fbin(FType::F32v2, FBinOp::Mul, 4, 4, 8));
                c.op(st64step(ap(4), po, 8));
            }
            Elem::F16 => {
                c.op(ld64_at(12, po, 0));
                widen4(c, 4, 12);
                c.op(fbin(FType::F32v2, FBinOp::Mul, 4, 4, 8));
                c.op(fbin(FType::F32v2, FBinOp::Mul, 6, 6, 8));
                narrow4(c, 12, 4);
                c.op(st64step(ap(12), po, 8));
            }
        }
    }
    c.op(alu(AluOp::Add, po, po, stride));
    c.branch(Instr::Brnzdec { a: g, target: 0 }, group);
    c.op(alu_imm(AluOp::Add, o, o, GROUP_ROW_BYTES as i16));
    c.op(alu_imm(AluOp::Add, st, st, GROUP_ROW_BYTES as i16));
    close_rows_and_exit(c, rows, row, end);
}

/// [`flash_rescale`] of f32 partials: a group at a time, its rows one run of 32 bytes each,
/// software-pipelined over the run (each pair's load and the store of the pair before the
/// one it multiplies in one `ldst64pace`, beside the multiplication), the row's `alpha` pair
/// loaded with its first pair from the run of factors (`ld2xst64pace`): four slots per row and
/// group (five with the factor loaded alone from the statistics, fourteen a pair at a time). The `rpt` body is the step from one row to the next, so no load
/// reaches past the worker's rows.
fn flash_rescale_f32(c: &mut Code) {
    load_state(c, FlashRescaleState::WORDS);
    let (o, st, rows, groups, stride) = (m(1), m(2), m(3), m(4), m(5));
    let (pl, ps, pa) = (m(6), m(7), m(8));
    let end = c.label();
    // `rows` becomes the `rpt` count (rows - 1), `groups` the loop's.
    loop_counts(c, &[rows, groups], end);
    let mul = |r: u8| fbin(FType::F32v2, FBinOp::Mul, r, r, 8);
    let ldst = |d: u8, s: u8| Instr::LdSt64Pace {
        d: ap(d),
        s: ap(s),
        p: [pl, ps],
    };
    let alpha = ld64step(ap(8), pa, 8);
    let group = c.label();
    c.bind(group);
    // The group's run, the first row's alpha and first pair ($a0:1; pairs 1..3 in $a2:3,
    // $a4:5, $a6:7).
    c.main_ops_ending(
        &[
            mov_m(pl, o),
            mov_m(ps, o),
            mov_m(pa, st),
            alpha,
            ld64step(ap(0), pl, 8),
        ],
        false,
    );
    c.bundle(ld64step(ap(2), pl, 8), mul(0));
    c.bundle(ldst(4, 0), mul(2));
    c.bundle(ldst(6, 2), mul(4));
    // The next group's run (alone: the `rpt` then starts on an odd word and its body of
    // bundles on an even one).
    c.op(alu(AluOp::Add, o, o, stride));
    // From one row to the next: the last pair of the row multiplied, the next row's alpha
    // and pairs loaded and multiplied, each stored one bundle later.
    c.rpt_bundles(Instr::Rpt {
        count: rows,
        body: 4,
    });
    // The next row's first pair and factor load together (the multiplication beside them
    // reads the factor before the load writes it).
    c.bundle(
        Instr::Ld2xSt64Pace {
            d: [ap(0), ap(8)],
            s: ap(4),
            p: [pl, pa, ps],
        },
        mul(6),
    );
    c.bundle(ldst(2, 6), mul(0));
    c.bundle(ldst(4, 0), mul(2));
    c.bundle(ldst(6, 2), mul(4));
    c.bundle(st64step(ap(4), ps, 8), mul(6));
    c.op(st64step(ap(6), ps, 8));
    c.branch(
        Instr::Brnzdec {
            a: groups,
            target: 0,
        },
        group,
    );
    exit_at(c, end);
}

/// Issue slots of [`flash_rescale`] over `rows` rows of `groups` groups.
pub fn flash_rescale_slots(p_ty: Elem, rows: u32, groups: u32) -> u32 {
    match (rows, groups) {
        // The state, the count checks that find a zero, `exit`.
        (0, _) => 5 + 1 + 1,
        (_, 0) => 5 + 2 + 1,
        // The state, the count checks, `exit`, then per group: the run's pointers, the first
        // alpha and pair, three bundles, the next run's pointer, the `rpt` and four bundles a
        // further row, the last pair's bundle and store, the branch.
        _ if p_ty == Elem::F32 => 5 + 4 + 1 + groups * (5 + 3 + 1 + 1 + 4 * (rows - 1) + 2 + 1),
        // The state, the count checks and the stride, `exit`; per row its alpha and pointers;
        // per group four pairs of eight slots, the pointer and the branch.
        _ => 11 + rows * (7 + groups * (4 * 8 + 2)),
    }
}
