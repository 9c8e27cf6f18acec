//! [`flash_combine`]: the partial results of the key blocks of the same rows merged and
//! normalised.

use ipu_isa::{AluOp, ConvOp, FBinOp, FType, FUnOp, Instr, MReg};

use super::*;
use crate::state::*;
use crate::types::Elem;

/// Merges the partial results of `J` key blocks for some rows and normalises them:
/// `M = max_j m_j`, `w_j = exp(m_j - M)`, `L = sum_j w_j l_j`, `O = sum_j w_j O_j` (in f32, in
/// a scratch row), `out = O * (1 / L)` stored as `out_ty` in `[dv / gout][rows][gout]`.
///
/// State: out (row 0), out group stride (bytes), rows, scratch (`dv` f32), sources `J`,
/// then per source: its `O` (row 0, group 0), its group stride (bytes), its statistics (row
/// 0). Sources are rows of `Gv = dv / cols` groups of 32 bytes of `p_ty`.
///
/// With `stage` (f32 partials only), the sources after the first are runs `stage` bytes apart
/// in one buffer ([`flash_combine_staged`]).
pub fn flash_combine(
    c: &mut Code,
    p_ty: Elem,
    out_ty: Elem,
    cols: u32,
    gout: u32,
    dv: u32,
    stage: u32,
) {
    if stage != 0 {
        assert_eq!(
            p_ty,
            Elem::F32,
            "flash_combine: a stage stride needs f32 partials"
        );
        flash_combine_staged(c, out_ty, cols, gout, dv, stage);
        return;
    }
    load_state(c, FlashCombineState::WORDS);
    let (out, ogs, rows, scratch, nsrc) = (m(1), m(2), m(3), m(4), m(5));
    let (q, base, gs, sp, cnt, po, pa, ro) = (m(6), m(7), m(8), m(9), m(10), m(11), m(12), m(13));
    let (tmp, g) = (m(14), m(15));
    let groups = dv / cols;
    let end = c.label();
    loop_counts(c, &[rows, nsrc], end);
    c.op(setzi(ro, 0));
    let row = c.label();
    c.bind(row);
    // Pass A: M in $a4, an `rpt` over the sources, each one's `max` co-issued with the load of
    // the next one's `m` (`$a0` starts at `-inf`, so the first `max` changes nothing).
    li(c, tmp, NEG_INF);
    c.op(mov_a(4, tmp));
    c.op(mov_a(0, tmp));
    c.op(alu_imm(
        AluOp::Add,
        q,
        m(0),
        (FlashCombineState::SOURCES_OFFSET + FlashCombineState::SOURCE_STATS) as i16,
    ));
    c.op(alu_imm(AluOp::Add, cnt, nsrc, 1));
    c.rpt_bundles(Instr::Rpt {
        count: cnt,
        body: 3,
    });
    c.op(ld32step_m(sp, q, FlashCombineState::SOURCE_BYTES as i16));
    c.op(alu(AluOp::Add, sp, sp, ro));
    c.bundle(ld32a(a(0), sp, 0), fbin(FType::F32, FBinOp::Max, 4, 4, 0));
    c.op(fbin(FType::F32, FBinOp::Max, 4, 4, 0));
    li(c, tmp, NEG_MAX);
    c.op(mov_a(5, tmp));
    c.op(fbin(FType::F32, FBinOp::Max, 4, 4, 5));
    // Pass B: per source, w = exp(m - M), L += w l, scratch (+)= w O.
    c.op(setzi(tmp, 0));
    c.op(mov_a(5, tmp));
    c.op(alu_imm(
        AluOp::Add,
        q,
        m(0),
        FlashCombineState::SOURCES_OFFSET as i16,
    ));
    let source = |c: &mut Code, first: bool| {
        // The source's `m` and `l` (one pair: statistics rows are 32-byte aligned), then its
        // weight and the sum's term beside the loads of its pointers.
        c.main_ops_ending(
            &[
                ld32m(sp, q, FlashCombineState::SOURCE_STATS as i16),
                alu(AluOp::Add, sp, sp, ro),
            ],
            false,
        );
        c.bundle(ld64_at(0, sp, 0), FLOAT_NOP);
        c.bundle(
            ld32m(base, q, FlashCombineState::SOURCE_O as i16),
            fbin(FType::F32, FBinOp::Sub, 0, 0, 4),
        );
        c.bundle(
            ld32m(gs, q, FlashCombineState::SOURCE_GROUP_STRIDE as i16),
            fun(FType::F32, FUnOp::Exp, 0, 0),
        );
        c.bundle(
            alu(AluOp::Add, base, base, ro),
            fbin(FType::F32, FBinOp::Mac, 5, 0, 1),
        );
        c.bundle(mov_m(pa, scratch), bcast(2, 0));
        // The statistics are read: `sp` now reads the running sum in step with `pa`.
        c.op(mov_m(sp, scratch));
        if !first {
            match p_ty {
                Elem::F32 => combine_source_f32(c, groups, [po, sp, pa], base, gs),
                Elem::F16 => combine_source_f16(c, groups, [po, sp, pa], base, gs),
            }
            c.op(alu_imm(
                AluOp::Add,
                q,
                q,
                FlashCombineState::SOURCE_BYTES as i16,
            ));
            return;
        }
        c.op(setzi(g, groups - 1));
        if p_ty == Elem::F32 || !first {
            // The loop's bundles start 8-byte aligned (a `nop` here, once per source).
            c.align_bundle();
        }
        let group = c.label();
        c.bind(group);
        c.op(mov_m(po, base));
        // Four elements per unit: 16 bytes of f32, 8 of f16.
        let units = GROUP_ROW_BYTES / if p_ty == Elem::F32 { 16 } else { 8 };
        if p_ty == Elem::F32 {
            combine_group_f32(c, first, [po, sp, pa]);
        }
        for _ in 0..if p_ty == Elem::F32 { 0 } else { units } {
            if first {
                // Four elements of O as f32 in $a6:7, $a8:9 (f16: widened from $a12:13).
                ld4(c, p_ty, 6, po);
                c.op(fbin(FType::F32v2, FBinOp::Mul, 6, 6, 2));
                c.op(fbin(FType::F32v2, FBinOp::Mul, 8, 8, 2));
                c.op(st64step(ap(6), pa, 8));
                c.op(st64step(ap(8), pa, 8));
            } else {
                // O and the running sum load together (`sp` walks the scratch row).
                match p_ty {
                    Elem::F32 => {
                        c.op(Instr::Ld2x64Pace {
                            d: [ap(6), ap(10)],
                            p: [po, sp],
                        });
                        c.op(Instr::Ld2x64Pace {
                            d: [ap(8), ap(14)],
                            p: [po, sp],
                        });
                    }
                    Elem::F16 => {
                        // Six issues, the second and fifth bundles: every unit starts on an
                        // odd word (after the group's pointer copy), so both stay aligned.
                        c.op(Instr::Ld2x64Pace {
                            d: [ap(12), ap(10)],
                            p: [po, sp],
                        });
                        c.bundle(ld64step(ap(14), sp, 8), conv(ConvOp::F16v2ToF32v2, 6, 12));
                        c.op(conv(ConvOp::F16v2ToF32v2, 8, 13));
                        c.op(fbin(FType::F32v2, FBinOp::Mac, 10, 6, 2));
                        c.bundle(
                            st64step(ap(10), pa, 8),
                            fbin(FType::F32v2, FBinOp::Mac, 14, 8, 2),
                        );
                        c.op(st64step(ap(14), pa, 8));
                        continue;
                    }
                }
                c.op(fbin(FType::F32v2, FBinOp::Mac, 10, 6, 2));
                c.op(fbin(FType::F32v2, FBinOp::Mac, 14, 8, 2));
                c.op(st64step(ap(10), pa, 8));
                c.op(st64step(ap(14), pa, 8));
            }
        }
        // The next group of the same rows.
        c.op(alu(AluOp::Add, base, base, gs));
        c.branch(Instr::Brnzdec { a: g, target: 0 }, group);
        c.op(alu_imm(
            AluOp::Add,
            q,
            q,
            FlashCombineState::SOURCE_BYTES as i16,
        ));
    };
    source(c, true);
    let sources_done = c.label();
    c.branch(Instr::Brz { a: nsrc, target: 0 }, sources_done);
    // `nsrc` holds J - 1: J - 1 more sources, so the counter starts at J - 2.
    c.op(alu_imm(AluOp::Sub, cnt, nsrc, 1));
    let more = c.label();
    c.bind(more);
    source(c, false);
    c.branch(Instr::Brnzdec { a: cnt, target: 0 }, more);
    c.bind(sources_done);
    // Pass C: out = scratch * (1 / L).
    c.op(fun(FType::F32, FUnOp::Rcp, 0, 5));
    c.op(bcast(2, 0));
    c.op(mov_m(pa, scratch));
    c.op(mov_m(po, out));
    let out_bytes = if out_ty == Elem::F32 { 4 } else { 2 };
    let run_bytes = gout * out_bytes;
    c.op(alu_imm(AluOp::Sub, tmp, ogs, run_bytes as i16));
    c.op(setzi(g, dv / gout - 1));
    let og = c.label();
    c.bind(og);
    for _ in 0..gout / 4 {
        c.op(ld64step(ap(6), pa, 8));
        c.op(ld64step(ap(8), pa, 8));
        c.op(fbin(FType::F32v2, FBinOp::Mul, 6, 6, 2));
        c.op(fbin(FType::F32v2, FBinOp::Mul, 8, 8, 2));
        st4(c, out_ty, 6, po);
    }
    c.op(alu(AluOp::Add, po, po, tmp));
    c.branch(Instr::Brnzdec { a: g, target: 0 }, og);
    c.op(alu_imm(AluOp::Add, ro, ro, GROUP_ROW_BYTES as i16));
    c.op(alu_imm(AluOp::Add, out, out, run_bytes as i16));
    close_rows_and_exit(c, rows, row, end);
}

/// One group row (four f32 pairs) of a source in [`flash_combine`]'s pass B, software
/// pipelined: pair `i` loads while pair `i - 1` computes and pair `i - 2` stores, the loads and
/// stores co-issued with the arithmetic (the paced forms load two pairs, or load one and store
/// one, in one issue). The first source scales `O` by `w` (`$a2:3`) into the scratch row
/// (`O` rotating through `$a6:7`, `$a8:9`, `$a10:11`); later ones add `w O` to the running
/// sum read from the scratch row by `sp` (`O` through `$a6:7`, `$a8:9`, the sums through
/// `$a10:11`, `$a12:13`, `$a14:15`). Six issues a group row against twelve one at a time; the
/// arithmetic is the same.
fn combine_group_f32(c: &mut Code, first: bool, [po, sp, pa]: [MReg; 3]) {
    let v = FType::F32v2;
    if first {
        let r = |i: usize| ap([6, 8, 10][i % 3]);
        let mul = |i: usize| fbin(v, FBinOp::Mul, r(i).0, r(i).0, 2);
        c.op(ld64step(r(0), po, 8));
        c.bundle(ld64step(r(1), po, 8), mul(0));
        c.bundle(
            Instr::LdSt64Pace {
                d: r(2),
                s: r(0),
                p: [po, pa],
            },
            mul(1),
        );
        c.bundle(
            Instr::LdSt64Pace {
                d: r(3),
                s: r(1),
                p: [po, pa],
            },
            mul(2),
        );
        c.bundle(st64step(r(2), pa, 8), mul(3));
        c.op(st64step(r(3), pa, 8));
    } else {
        let o = |i: usize| ap([6, 8][i % 2]);
        let l = |i: usize| ap([10, 12, 14][i % 3]);
        let mac = |i: usize| fbin(v, FBinOp::Mac, l(i).0, o(i).0, 2);
        c.op(Instr::Ld2x64Pace {
            d: [o(0), l(0)],
            p: [po, sp],
        });
        c.bundle(
            Instr::Ld2x64Pace {
                d: [o(1), l(1)],
                p: [po, sp],
            },
            mac(0),
        );
        for i in 2..4 {
            c.bundle(
                Instr::Ld2xSt64Pace {
                    d: [o(i), l(i)],
                    s: l(i - 2),
                    p: [po, sp, pa],
                },
                mac(i - 1),
            );
        }
        c.bundle(st64step(l(2), pa, 8), mac(3));
        c.op(st64step(l(3), pa, 8));
    }
}

/// The groups of a source after the first, f32 partials: `scratch += w O` four f32v2 units a
/// group, software-pipelined over all the source's groups (each unit's load and the store of
/// the unit two before co-issued with the multiply-add of the one before), the groups after
/// the first in an `rpt`. `po` walks a group's 32 bytes and then jumps to the next group's
/// (`gs`, the group stride, becomes the jump); `sp` and `pa` walk the scratch row.
fn combine_source_f32(c: &mut Code, groups: u32, [po, sp, pa]: [MReg; 3], base: MReg, gs: MReg) {
    let v = FType::F32v2;
    let o = |u: usize| ap([6, 8][u % 2]);
    let l = |u: usize| ap([10, 12, 14, 0][u % 4]);
    let mac = |u: usize| fbin(v, FBinOp::Mac, l(u).0, o(u).0, 2);
    let load = |u: usize| Instr::Ld2x64Pace {
        d: [o(u), l(u)],
        p: [po, sp],
    };
    let load_store = |u: usize| Instr::Ld2xSt64Pace {
        d: [o(u), l(u)],
        s: l(u + 2),
        p: [po, sp, pa],
    };
    let jump = alu(AluOp::Add, po, po, gs);
    c.main_ops_ending(
        &[
            mov_m(po, base),
            alu_imm(AluOp::Sub, gs, gs, GROUP_ROW_BYTES as i16),
        ],
        true,
    );
    // The first group: nothing to store before its third unit.
    c.op(load(0));
    c.bundle(load(1), mac(0));
    c.bundle(load_store(2), mac(1));
    c.bundle(load_store(3), mac(2));
    c.op(jump);
    c.rpt_bundles(Instr::Rpti {
        count: (groups - 1) as u16,
        body: 5,
    });
    for u in 0..4 {
        c.bundle(load_store(u), mac(u + 3));
    }
    c.op(jump);
    c.op(mac(3));
    c.op(st64step(l(2), pa, 8));
    c.op(st64step(l(3), pa, 8));
}

/// [`combine_source_f32`] for f16 partials: a unit is four f16 of `O` (`$a12:13`), widened
/// into `$a6:7` and `$a8:9`, and the four f32 of the running sum (`$a10:11`, `$a14:15`), five
/// bundles a unit: the paced load of `O` and the sum's first pair (storing the unit before's
/// second pair), the second pair's load with the first widening, the second widening (beside
/// the jump to the next group after a group's last unit), and the two multiply-adds, the first
/// pair's store beside the second.
fn combine_source_f16(c: &mut Code, groups: u32, [po, sp, pa]: [MReg; 3], base: MReg, gs: MReg) {
    let v = FType::F32v2;
    let jump = alu(AluOp::Add, po, po, gs);
    let unit = |c: &mut Code, first: bool, jump_here: bool| {
        let load = if first {
            Instr::Ld2x64Pace {
                d: [ap(12), ap(10)],
                p: [po, sp],
            }
        } else {
            Instr::Ld2xSt64Pace {
                d: [ap(12), ap(10)],
                s: ap(14),
                p: [po, sp, pa],
            }
        };
        c.bundles(
            &[
                load,
                ld64step(ap(14), sp, 8),
                if jump_here { jump } else { Instr::Nop },
                Instr::Nop,
                st64step(ap(10), pa, 8),
            ],
            &[
                FLOAT_NOP,
                conv(ConvOp::F16v2ToF32v2, 6, 12),
                conv(ConvOp::F16v2ToF32v2, 8, 13),
                fbin(v, FBinOp::Mac, 10, 6, 2),
                fbin(v, FBinOp::Mac, 14, 8, 2),
            ],
        );
    };
    let units = GROUP_ROW_BYTES / 8;
    c.main_ops_ending(
        &[
            mov_m(po, base),
            alu_imm(AluOp::Sub, gs, gs, GROUP_ROW_BYTES as i16),
        ],
        false,
    );
    // The first group: its first unit stores nothing; the jump alone leaves the `rpt` on an
    // odd word and its body of bundles on an even one.
    for u in 0..units {
        unit(c, u == 0, false);
    }
    c.op(jump);
    c.rpt_bundles(Instr::Rpti {
        count: (groups - 1) as u16,
        body: (5 * units) as u8,
    });
    for u in 0..units {
        unit(c, false, u + 1 == units);
    }
    c.op(st64step(ap(14), pa, 8));
}

/// The stage stride [`flash_combine`] takes (`Kernel::FlashCombine::stage`) for `sources`
/// sources of `rows` rows of `groups` groups (and their statistics) when every source after
/// the first is a run of `(groups + 1) * rows * 32` bytes of one stage buffer: that stride
/// for f32 partials and two sources or more where a load's increment reaches it, else 0.
pub fn combine_stage(p_ty: Elem, groups: u32, rows: u32, sources: u32) -> u32 {
    let stride = (groups + 1) * rows * GROUP_ROW_BYTES;
    if p_ty == Elem::F32 && sources >= 2 && stride <= i16::MAX as u32 {
        stride
    } else {
        0
    }
}

/// Issue slots of [`flash_combine`] over `rows` rows of `sources` sources, with a stage
/// stride (`staged`) or without.
#[allow(clippy::too_many_arguments)]
pub fn flash_combine_slots(
    p_ty: Elem,
    out_ty: Elem,
    cols: u32,
    gout: u32,
    dv: u32,
    rows: u32,
    sources: u32,
    staged: bool,
) -> u32 {
    if staged {
        // The state, the count checks, the strides, `exit`; per row: pass A's set-up (the own
        // source's `m` and the stage's pointer), `rpt`, a slot a further source and closing
        // five; pass B's set-up and `rpt`, five slots a
        // source but the last and its nine (with 1 / L); the units' set-up; per unit the first
        // source (six, with the `rpt`'s count and the `rpt`), two slots a further source but
        // the first, the last one's multiply-add, the normalisation and the stores; per
        // output group its jump and branch; the row's pointers and branch.
        if rows == 0 {
            return 5 + 1 + 1;
        }
        let j = sources;
        let unit = if out_ty == Elem::F32 { 12 } else { 13 } + 2 * (j - 2);
        let row = (14 + j) + (17 + 5 * (j - 1)) + 7 + (dv / gout) * (gout / 4 * unit + 2) + 3;
        return 15 + rows * row;
    }
    let groups = dv / cols;
    let units = if p_ty == Elem::F32 { 2 } else { 4 };
    // The first source's loads and f16 widening per unit.
    let load_first = if p_ty == Elem::F32 { 2 } else { 3 };
    // The first source's group row: its loads, arithmetic and stores (f32: the pointer copy,
    // the six issues of `combine_group_f32`, the pointer update and the branch).
    let group_first = if p_ty == Elem::F32 {
        1 + 6 + 2
    } else {
        units * (load_first + 4) + 2
    };
    // A source's statistics, weight and pointers: two ops alone, five bundles, one op alone.
    let setup = 2 + 6 + 1;
    let per_source_first = setup + groups * group_first + 1;
    let per_source = if p_ty == Elem::F32 {
        // `combine_source_f32`: two set-up ops, the first group's five slots, the `rpt` and
        // five a further group, the last group's multiply-add and stores.
        setup + 2 + 5 + 1 + 5 * (groups - 1) + 3 + 2
    } else {
        // `combine_source_f16`: two set-up ops, five bundles a unit of four, the first group's
        // jump, the `rpt`, the last store.
        setup + 2 + 20 * groups + 1 + 1 + 1 + 2
    };
    let out_units = gout / 4;
    let store = if out_ty == Elem::F32 { 2 } else { 3 };
    let pass_c = 7 + (dv / gout) * (out_units * (4 + store) + 2);
    // Pass A: its set-up and `rpt`, three slots a source, the last `max`; the floor.
    let row = 12
        + sources * 3
        + 8
        + per_source_first
        + sources.saturating_sub(1) * per_source
        + pass_c
        + 3;
    12 + rows * row
}

/// [`flash_combine`] of f32 partials whose sources after the first sit in one stage buffer,
/// `stage` bytes apart (`Kernel::FlashCombine::stage`), each `[groups][rows][8]` with the
/// group stride of source 1: for each output unit of four (half a group), every source's
/// pair of pairs and weight load together while the previous one multiply-adds, the sum kept
/// in registers over the sources (no scratch row), then normalised and stored. Two slots a
/// source and unit against five; the arithmetic is [`flash_combine`]'s, in the same order.
///
/// Per row: pass A (the maximum, as [`flash_combine`]); pass B, one software pipeline over
/// the sources: `w_j = exp(m_j - M)` stored as a pair in the scratch (from byte 8; byte 0
/// takes the pipeline's first, empty store), `L += w_j l_j`; then per unit the first source
/// (`O_0 w_0`, the row's own partial, group stride from its entry) and the stage's sources
/// (`+= O_j w_j`), `* (1 / L)`, stored.
fn flash_combine_staged(c: &mut Code, out_ty: Elem, cols: u32, gout: u32, dv: u32, stage: u32) {
    assert!(cols == 8 && gout.is_multiple_of(8) && dv.is_multiple_of(gout));
    load_state(c, FlashCombineState::WORDS);
    let (out, ogs, rows, scratch, nsrc) = (m(1), m(2), m(3), m(4), m(5));
    let (q, sp, pw, ph, po, gs0, gst, ro, tmp, g) = (
        m(6),
        m(7),
        m(8),
        m(9),
        m(10),
        m(11),
        m(12),
        m(13),
        m(14),
        m(15),
    );
    let (p0, ps) = (q, sp);
    let v = FType::F32v2;
    let end = c.label();
    loop_counts(c, &[rows, nsrc], end);
    let entry = |i: u32, field: u32| {
        (FlashCombineState::SOURCES_OFFSET + i * FlashCombineState::SOURCE_BYTES + field) as i16
    };
    // Once: the out pointer's jump between output groups, the first source's group stride
    // less one group row, the stage's group stride, the weights after the empty slot.
    let out_bytes = if out_ty == Elem::F32 { 4 } else { 2 };
    let run_bytes = gout * out_bytes;
    c.op(alu_imm(AluOp::Sub, ogs, ogs, run_bytes as i16));
    c.op(ld32m(
        gs0,
        m(0),
        entry(0, FlashCombineState::SOURCE_GROUP_STRIDE),
    ));
    c.op(alu_imm(AluOp::Sub, gs0, gs0, GROUP_ROW_BYTES as i16));
    c.op(ld32m(
        gst,
        m(0),
        entry(1, FlashCombineState::SOURCE_GROUP_STRIDE),
    ));
    c.op(setzi(ro, 0));
    let row = c.label();
    c.bind(row);
    // Pass A: M in $a4. The own source's `m`, then the stage's, `stage` bytes apart: one
    // bundle a source, its `max` beside the load of the next one's `m` (`$a0` starts at
    // `-inf`, so the first `max` changes nothing).
    li(c, tmp, NEG_INF);
    c.main_ops_ending(
        &[
            mov_a(4, tmp),
            mov_a(0, tmp),
            ld32m(sp, m(0), entry(0, FlashCombineState::SOURCE_STATS)),
            alu(AluOp::Add, sp, sp, ro),
        ],
        false,
    );
    c.bundle(ld32a(a(0), sp, 0), fbin(FType::F32, FBinOp::Max, 4, 4, 0));
    c.main_ops_ending(
        &[
            ld32m(sp, m(0), entry(1, FlashCombineState::SOURCE_STATS)),
            alu(AluOp::Add, sp, sp, ro),
        ],
        true,
    );
    c.rpt_bundles(Instr::Rpt {
        count: nsrc,
        body: 1,
    });
    c.bundle(
        ld32step_a(a(0), sp, stage as i16),
        fbin(FType::F32, FBinOp::Max, 4, 4, 0),
    );
    c.op(fbin(FType::F32, FBinOp::Max, 4, 4, 0));
    li(c, tmp, NEG_MAX);
    c.op(mov_a(5, tmp));
    c.op(fbin(FType::F32, FBinOp::Max, 4, 4, 5));
    // Pass B: L in $a5 from zero; source j's (m, l) in $a0:1, its weight's pair in $a2:3.
    c.main_ops_ending(
        &[
            setzi(tmp, 0),
            mov_a(5, tmp),
            mov_m(pw, scratch),
            ld32m(sp, m(0), entry(0, FlashCombineState::SOURCE_STATS)),
            alu(AluOp::Add, sp, sp, ro),
            alu_imm(
                AluOp::Add,
                q,
                m(0),
                entry(1, FlashCombineState::SOURCE_STATS),
            ),
            ld64_at(0, sp, 0),
        ],
        true,
    );
    c.rpt_bundles(Instr::Rpt {
        count: nsrc,
        body: 4,
    });
    c.bundle(
        ld32step_m(sp, q, FlashCombineState::SOURCE_BYTES as i16),
        fbin(FType::F32, FBinOp::Sub, 0, 0, 4),
    );
    c.bundle(
        alu(AluOp::Add, sp, sp, ro),
        fun(FType::F32, FUnOp::Exp, 0, 0),
    );
    c.bundle(
        st64step(ap(2), pw, 8),
        fbin(FType::F32, FBinOp::Mac, 5, 0, 1),
    );
    c.bundle(ld64_at(0, sp, 0), bcast(2, 0));
    // The last source.
    c.bundle(
        st64step(ap(2), pw, 8),
        fbin(FType::F32, FBinOp::Sub, 0, 0, 4),
    );
    c.op(fun(FType::F32, FUnOp::Exp, 0, 0));
    c.op(fbin(FType::F32, FBinOp::Mac, 5, 0, 1));
    c.op(bcast(2, 0));
    c.op(st64step(ap(2), pw, 8));
    // 1 / L in $a14:15.
    c.op(fun(FType::F32, FUnOp::Rcp, 6, 5));
    c.op(bcast(14, 6));
    // The units: the first source's pointer walks its rows' groups, the stage's start `ph`
    // moves a group at a time, the sources after the first (`nsrc - 1`) in an `rpt`.
    c.main_ops_ending(
        &[
            ld32m(p0, m(0), entry(0, FlashCombineState::SOURCE_O)),
            alu(AluOp::Add, p0, p0, ro),
            ld32m(ph, m(0), entry(1, FlashCombineState::SOURCE_O)),
            alu(AluOp::Add, ph, ph, ro),
            mov_m(po, out),
            setzi(g, dv / gout - 1),
            alu_imm(AluOp::Add, pw, scratch, 8),
        ],
        false,
    );
    let og = c.label();
    c.bind(og);
    for u in 0..gout / 4 {
        let half = u % 2;
        // The first source: O_0 w_0 into the sums $a8:9, $a10:11 (the weights' pointer is
        // at w_0: set before the first unit and at the end of each).
        c.op(Instr::Ld2x64Pace {
            d: [ap(0), ap(12)],
            p: [p0, pw],
        });
        c.op(ld64step(ap(2), p0, 8));
        c.bundle(
            if half == 0 {
                mov_m(ps, ph)
            } else {
                alu_imm(AluOp::Add, ps, ph, 16)
            },
            fbin(v, FBinOp::Mul, 8, 0, 12),
        );
        c.bundle(
            Instr::Ld2x64Pace {
                d: [ap(0), ap(12)],
                p: [ps, pw],
            },
            fbin(v, FBinOp::Mul, 10, 2, 12),
        );
        // Source j: its second pair loads and its first multiply-adds; the next source's first
        // pair and weight load while its second multiply-adds.
        c.bundle(
            ld64step(ap(2), ps, (stage - 8) as i16),
            fbin(v, FBinOp::Mac, 8, 0, 12),
        );
        c.op(alu_imm(AluOp::Sub, tmp, nsrc, 1));
        c.rpt_bundles(Instr::Rpt {
            count: tmp,
            body: 2,
        });
        c.bundle(
            Instr::Ld2x64Pace {
                d: [ap(0), ap(12)],
                p: [ps, pw],
            },
            fbin(v, FBinOp::Mac, 10, 2, 12),
        );
        c.bundle(
            ld64step(ap(2), ps, (stage - 8) as i16),
            fbin(v, FBinOp::Mac, 8, 0, 12),
        );
        c.bundle(
            if half == 1 {
                alu(AluOp::Add, p0, p0, gs0)
            } else {
                Instr::Nop
            },
            fbin(v, FBinOp::Mac, 10, 2, 12),
        );
        // out = sum * (1 / L).
        c.bundle(
            if half == 1 {
                alu(AluOp::Add, ph, ph, gst)
            } else {
                Instr::Nop
            },
            fbin(v, FBinOp::Mul, 8, 8, 14),
        );
        c.bundle(
            alu_imm(AluOp::Add, pw, scratch, 8),
            fbin(v, FBinOp::Mul, 10, 10, 14),
        );
        match out_ty {
            Elem::F32 => {
                c.op(st64step(ap(8), po, 8));
                c.op(st64step(ap(10), po, 8));
            }
            Elem::F16 => {
                // The first narrowing in a bundle keeps the next unit 8-byte aligned.
                c.bundle(Instr::Nop, conv(ConvOp::F32v2ToF16v2, 12, 8));
                c.op(conv(ConvOp::F32v2ToF16v2, 13, 10));
                c.op(st64step(ap(12), po, 8));
            }
        }
    }
    c.op(alu(AluOp::Add, po, po, ogs));
    c.branch(Instr::Brnzdec { a: g, target: 0 }, og);
    c.op(alu_imm(AluOp::Add, ro, ro, GROUP_ROW_BYTES as i16));
    c.op(alu_imm(AluOp::Add, out, out, run_bytes as i16));
    close_rows_and_exit(c, rows, row, end);
}
