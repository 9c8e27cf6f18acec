//! [`flash_mask`] and [`flash_mask_bool`]: a mask added to a block of scores, and a boolean
//! mask made additive on its homes.

use ipu_isa::{AluOp, FBinOp, FType, Instr, MReg};

use super::*;
use crate::state::*;
use crate::types::Elem;

/// Adds a mask to a block of scores in place, both in the scores' layout `[groups][R][cols]`
/// (partials type): `s = s * scale + mask` with `scaled` (two roundings, as the expansion's
/// `scale` and `add`), `s = s + mask` without (the scores arrive scaled). The mask's rows
/// advance by `mask_row_step` bytes: 32 for a mask with a row per query, 0 for one row
/// broadcast over the queries. f32 arithmetic for f32 scores; f16 scores are widened for the
/// multiplication, narrowed, and added as f16v4 (one rounding, as the expansion's f16 `add`).
///
/// State: S (row 0, group 0), mask (row 0, group 0), rows, groups, S group stride (bytes),
/// mask group stride (bytes), mask row step (bytes), scale (f32 bits).
pub fn flash_mask(c: &mut Code, s_ty: Elem, scaled: bool, broadcast: bool) {
    if !scaled {
        return flash_mask_stream(c, s_ty, broadcast);
    }
    load_state(c, FlashMaskState::WORDS);
    let (s, mk, rows, groups, s_stride, m_stride, m_step) =
        (m(1), m(2), m(3), m(4), m(5), m(6), m(7));
    let (ps, pm, g) = (m(9), m(10), m(11));
    let end = c.label();
    loop_counts(c, &[rows, groups], end);
    c.op(alu_imm(
        AluOp::Sub,
        s_stride,
        s_stride,
        GROUP_ROW_BYTES as i16,
    ));
    c.op(alu_imm(
        AluOp::Sub,
        m_stride,
        m_stride,
        GROUP_ROW_BYTES as i16,
    ));
    if scaled {
        c.op(mov_a(8, m(8)));
        c.op(bcast(8, 8));
    }
    let row = c.label();
    c.bind(row);
    c.op(mov_m(ps, s));
    c.op(mov_m(pm, mk));
    c.op(mov_m(g, groups));
    let group = c.label();
    c.bind(group);
    for _ in 0..GROUP_ROW_BYTES / 8 {
        match s_ty {
            Elem::F32 => {
                c.op(ld64_at(0, ps, 0));
                c.op(ld64step(ap(2), pm, 8));
                if scaled {
                    c.op(fbin(FType::F32v2, FBinOp::Mul, 0, 0, 8));
                }
                c.op(fbin(FType::F32v2, FBinOp::Add, 0, 0, 2));
                c.op(st64step(ap(0), ps, 8));
            }
            Elem::F16 => {
                c.op(ld64_at(12, ps, 0));
                c.op(ld64step(ap(14), pm, 8));
                if scaled {
                    widen4(c, 0, 12);
                    c.op(fbin(FType::F32v2, FBinOp::Mul, 0, 0, 8));
                    c.op(fbin(FType::F32v2, FBinOp::Mul, 2, 2, 8));
                    narrow4(c, 12, 0);
                }
                c.op(fbin(FType::F16v4, FBinOp::Add, 12, 12, 14));
                c.op(st64step(ap(12), ps, 8));
            }
        }
    }
    c.op(alu(AluOp::Add, ps, ps, s_stride));
    c.op(alu(AluOp::Add, pm, pm, m_stride));
    c.branch(Instr::Brnzdec { a: g, target: 0 }, group);
    c.op(alu_imm(AluOp::Add, s, s, GROUP_ROW_BYTES as i16));
    c.op(alu(AluOp::Add, mk, mk, m_step));
    close_rows_and_exit(c, rows, row, end);
}

/// [`flash_mask`] without the scaling (`s = s + mask`), a group at a time: a group's rows are
/// one contiguous run of the scores (and, unless `broadcast`, of the mask), so each group is one
/// software pipeline of 64-bit vectors, a vector's load (and its mask's) and the store of the
/// vector before in one paced issue beside the add of the vector between: one slot a vector.
/// A `broadcast` mask (one row for every query: its row step is 0) has its group's four vectors
/// in `$a8..$a15` for the group. The sum is in `$a4:5`, the scores in `$a0:1`, the mask's in
/// `$a2:3`.
fn flash_mask_stream(c: &mut Code, s_ty: Elem, broadcast: bool) {
    load_state(c, FlashMaskState::WORDS);
    let (s, mk, rows, groups, s_stride, m_stride) = (m(1), m(2), m(3), m(4), m(5), m(6));
    let (pst, cnt, adv_s, adv_m) = (m(9), m(12), m(13), m(14));
    let v = s_ty.vector_type();
    let add = |mask: u8| fbin(v, FBinOp::Add, 4, 0, mask);
    let end = c.label();
    c.branch(Instr::Brz { a: rows, target: 0 }, end);
    loop_counts(c, &[groups], end);
    // The scores' pointer walks a group's rows (32 bytes each) and then jumps to the next
    // group; so does the mask's, or it loads the group's single row.
    c.op(alu_imm(AluOp::Shl, adv_s, rows, 5));
    if broadcast {
        c.op(alu_imm(AluOp::Sub, adv_m, m_stride, GROUP_ROW_BYTES as i16));
        c.op(alu_imm(AluOp::Sub, cnt, rows, 1));
    } else {
        c.op(alu(AluOp::Sub, adv_m, m_stride, adv_s));
        c.op(alu_imm(AluOp::Shl, cnt, rows, 2));
        c.op(alu_imm(AluOp::Sub, cnt, cnt, 2));
    }
    c.op(alu(AluOp::Sub, adv_s, s_stride, adv_s));
    let group = c.label();
    c.bind(group);
    if broadcast {
        let m_of = |i: u32| 8 + 2 * (i % 4) as u8;
        let mut pre: Vec<Instr> = (0..4).map(|i| ld64step(ap(m_of(i)), mk, 8)).collect();
        pre.extend([mov_m(pst, s), ld64step(ap(0), s, 8)]);
        c.main_ops_ending(&pre, false);
        c.bundle(ld64step(ap(0), s, 8), add(m_of(0)));
        let paced = Instr::LdSt64Pace {
            d: ap(0),
            s: ap(4),
            p: [s, pst],
        };
        // The `rpt` starts on an even word here: one aligning `nop`, counted by the model.
        c.rpt_bundles(Instr::Rpt {
            count: cnt,
            body: 4,
        });
        for i in 1..=4 {
            c.bundle(paced, add(m_of(i)));
        }
        c.bundle(paced, add(m_of(1)));
        c.bundle(paced, add(m_of(2)));
        c.bundle(st64step(ap(4), pst, 8), add(m_of(3)));
    } else {
        let load = Instr::Ld2x64Pace {
            d: [ap(0), ap(2)],
            p: [s, mk],
        };
        c.main_ops_ending(&[mov_m(pst, s), load], false);
        c.bundle(load, add(2));
        c.rpt_bundles(Instr::Rpt {
            count: cnt,
            body: 1,
        });
        c.bundle(
            Instr::Ld2xSt64Pace {
                d: [ap(0), ap(2)],
                s: ap(4),
                p: [s, mk, pst],
            },
            add(2),
        );
        c.bundle(st64step(ap(4), pst, 8), add(2));
    }
    c.op(st64step(ap(4), pst, 8));
    c.op(alu(AluOp::Add, s, s, adv_s));
    c.op(alu(AluOp::Add, mk, mk, adv_m));
    c.branch(
        Instr::Brnzdec {
            a: groups,
            target: 0,
        },
        group,
    );
    exit_at(c, end);
}

/// Issue slots of [`flash_mask`] over `rows` rows of `groups` groups (`broadcast`: one mask row
/// for every query).
pub fn flash_mask_slots(s_ty: Elem, scaled: bool, broadcast: bool, rows: u32, groups: u32) -> u32 {
    if !scaled {
        let words = FlashMaskState::WORDS as u32;
        if rows == 0 {
            return words + 1 + 1;
        }
        if groups == 0 {
            return words + 1 + 1 + 1;
        }
        // The state, the checks, the group count's decrement, the jumps and the `rpt` count,
        // `exit`; per group the pipeline (one slot a vector), its set-up and ends, the aligning
        // `nop`, the `rpt`, the two jumps and the branch.
        let n = 4 * rows;
        return if broadcast {
            words + 1 + 2 + 4 + 1 + groups * (6 + 1 + 1 + 1 + (n - 4) + 3 + 1 + 3)
        } else {
            words + 1 + 2 + 5 + 1 + groups * (2 + 1 + 1 + 1 + (n - 2) + 1 + 1 + 3)
        };
    }
    // Per 64 bits: two loads, the add, the store, and the scaling (f16: widen, two
    // multiplications, narrow).
    let per = 4 + match (s_ty, scaled) {
        (_, false) => 0,
        (Elem::F32, true) => 1,
        (Elem::F16, true) => 6,
    };
    let fixed = 8 + 4 + 2 + if scaled { 2 } else { 0 } + 1;
    fixed + rows * (6 + groups * (4 * per + 3))
}

/// The lowest finite value of each partials type, as [`flash_mask_bool`] writes it for a
/// hidden key (f32 bits; an f16 in the low half).
const LOWEST_F32: u32 = 0xFF7F_FFFF;
/// See [`LOWEST_F32`].
const LOWEST_F16: u32 = 0xFBFF;

/// A boolean mask (a byte an element, nonzero where the key is visible) to the additive mask
/// in `ty`: exactly 0 for a visible key and the lowest finite value of `ty` for a hidden one,
/// what `(cast(m) - 1) * largest` gives (`docs/numerics.md`, flash attention with a mask).
/// An element at a time in the integer unit, in an `rpt` over groups of four: its byte loaded
/// (`ldz8`), compared with zero (1 where hidden) and multiplied by the lowest value's bits, the
/// word stored (f16: two elements' halves in one word). Four slots an element.
///
/// State ([`CastState`]): input (bytes), out, groups of four elements.
pub fn flash_mask_bool(c: &mut Code, ty: Elem) {
    load_state(c, CastState::WORDS);
    let (input, out, groups) = (m(1), m(2), m(3));
    let (lo, hi) = (m(10), m(11));
    let end = exit_if_zero(c, groups);
    match ty {
        Elem::F32 => li(c, lo, LOWEST_F32),
        Elem::F16 => {
            c.op(setzi(lo, LOWEST_F16));
            li(c, hi, LOWEST_F16 << 16);
        }
    }
    let byte = |d: MReg| ldz8step_m(d, input, 1);
    let store = |s: MReg| st32step_m(s, out, 4);
    let hidden = |d: MReg, k: MReg| [alu_imm(AluOp::CmpEq, d, d, 0), alu(AluOp::Mul, d, d, k)];
    rpt(c, groups, |c| {
        for pair in 0..2 {
            let (t0, t1) = (m(4 + 2 * pair), m(5 + 2 * pair));
            match ty {
                Elem::F32 => {
                    for t in [t0, t1] {
                        c.op(byte(t));
                        for op in hidden(t, lo) {
                            c.op(op);
                        }
                        c.op(store(t));
                    }
                }
                Elem::F16 => {
                    c.op(byte(t0));
                    c.op(byte(t1));
                    for op in hidden(t0, lo).into_iter().chain(hidden(t1, hi)) {
                        c.op(op);
                    }
                    c.op(alu(AluOp::Or, t0, t0, t1));
                    c.op(store(t0));
                }
            }
        }
    });
    exit_at(c, end);
}

/// Issue slots of [`flash_mask_bool`] over `groups` groups of four elements: the state, the
/// count check, the lowest value's bits (f16: a half each), the `rpt` and sixteen slots a
/// group, `exit`.
pub fn flash_mask_bool_slots(ty: Elem, groups: u32) -> u32 {
    if groups == 0 {
        return 3 + 1 + 1;
    }
    let consts = match ty {
        Elem::F32 => 2,
        Elem::F16 => 3,
    };
    3 + 1 + consts + 1 + 16 * groups + 1
}
