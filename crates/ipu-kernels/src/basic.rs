//! The basic kernels: the AMP pass, elementwise vector operations, casts, zero fill, padding
//! clears and causal masks, each with its cycle model.

use ipu_isa::{APair, AluOp, ConvOp, FBinOp, FType, FUnOp, Fp8Format, Instr, MReg};

use crate::code::*;
use crate::state::*;
use crate::types::{BinOp, CastType, Elem};

/// The AMP pass. Each row is four `amp` phases, each co-issued with the loads of the next
/// phase's operands and the store of the previous phase's result; outputs trail their row by
/// one row, so the pass runs one dummy row and drains. With `partials`, the partials-in come
/// from a buffer distinct from the output (ping-pong), so no worker reads what another writes.
/// How the workers of an AMP pass find their rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AmpShare {
    /// One worker per state ([`Kernel::Amp`]).
    One,
    /// One state for all six, with row bounds ([`Kernel::AmpAll`]).
    Bounds,
    /// One state for all six, a pass per context ([`Kernel::AmpTable`]).
    Table,
    /// [`AmpShare::Table`], no context without rows ([`Kernel::AmpTableDense`]).
    TableDense,
}

pub(crate) fn amp(c: &mut Code, partials: bool, share: AmpShare) {
    match share {
        AmpShare::Bounds => {
            // m1 in, m2 partials, m3 out; this worker's rows b[ctx]..b[ctx + 1].
            load_state(c, AmpAllState::WORDS);
            c.op(Instr::Get {
                d: m(5),
                sys: ipu_isa::SysReg::ContextId,
            });
            c.op(alu_imm(AluOp::Shl, m(5), m(5), 2));
            c.op(alu(AluOp::Add, m(5), m(5), m(0)));
            c.op(ld32m(m(6), m(5), AmpAllState::BOUNDS_OFFSET as i16));
            c.op(ld32m(m(4), m(5), AmpAllState::BOUNDS_OFFSET as i16 + 4));
            c.op(alu(AluOp::Sub, m(4), m(4), m(6)));
            c.op(alu_imm(AluOp::Shl, m(6), m(6), 5));
            c.op(alu(AluOp::Add, m(1), m(1), m(6)));
            c.op(alu(AluOp::Add, m(2), m(2), m(6)));
            c.op(alu(AluOp::Add, m(3), m(3), m(6)));
        }
        AmpShare::Table | AmpShare::TableDense => {
            // This context's entry of the table, then the single-worker pass.
            c.op(Instr::Get {
                d: m(5),
                sys: ipu_isa::SysReg::ContextId,
            });
            c.op(alu_imm(
                AluOp::Shl,
                m(5),
                m(5),
                AmpTableState::ENTRY_BYTES.trailing_zeros() as i16,
            ));
            c.op(alu(AluOp::Add, m(0), m(0), m(5)));
            if share == AmpShare::Table {
                load_state(c, AmpState::WORDS); // m1 in, m2 partials, m3 out, m4 rows
            }
        }
        AmpShare::One => load_state(c, AmpState::WORDS), // m1 in, m2 partials, m3 out, m4 rows
    }
    let dense = share == AmpShare::TableDense;
    let end = c.label();
    if !dense {
        c.branch(Instr::Brz { a: m(4), target: 0 }, end);
    }
    // The state's loads (dense) and the zero partials-in of a first pass ($a12:13), as Main
    // ops; dense, laid out so that the bundles that follow need no aligning `nop`.
    let mut pre: Vec<Instr> = Vec::new();
    if dense {
        pre.extend((0..AmpState::WORDS).map(|i| ld32m(m(i + 1), m(0), 4 * i as i16)));
    }
    if !partials {
        pre.extend(AmpOps::zeros());
    }
    let ops = AmpOps::new(partials);
    if dense {
        pre.push(ops.load());
        c.main_ops_ending(&pre, false);
    } else {
        for op in pre {
            c.op(op);
        }
        c.op(ops.load());
    }
    // Row 0 and phase 0 of row 1: nothing of this pass to store yet.
    for phase in [0, 1, 2, 3, 0] {
        c.bundle(ops.load(), ops.amp(phase));
    }
    c.op(alu_imm(AluOp::Sub, m(5), m(4), 1));
    c.rpt_bundles(Instr::Rpt {
        count: m(5),
        body: 4,
    });
    ops.rows_body(c, m(3));
    ops.drain(c, m(3));
    exit_at(c, end);
}

/// The operations of an AMP pass: input rows through `$m1` (into `$a0:1`), partials-in
/// through `$m2` (into `$a2:3`, or the zeros of `$a12:13` for a first pass), outputs from
/// `$a4:5`.
struct AmpOps {
    partials: bool,
}

impl AmpOps {
    const INP: APair = APair(0);
    const PART: APair = APair(2);
    const OUT: APair = APair(4);
    const ZEROS: APair = APair(12);

    fn new(partials: bool) -> Self {
        AmpOps { partials }
    }

    fn amp(&self, phase: u8) -> Instr {
        Instr::Amp {
            d: Self::OUT,
            a: Self::INP,
            p: if self.partials {
                Self::PART
            } else {
                Self::ZEROS
            },
            phase,
        }
    }

    /// The next phase's operands.
    fn load(&self) -> Instr {
        if self.partials {
            Instr::Ld2x64Pace {
                d: [Self::INP, Self::PART],
                p: [m(1), m(2)],
            }
        } else {
            ld64step(Self::INP, m(1), 8)
        }
    }

    /// The next phase's operands and the store of the output before them through `to`.
    fn load_store(&self, to: MReg) -> Instr {
        if self.partials {
            Instr::Ld2xSt64Pace {
                d: [Self::INP, Self::PART],
                s: Self::OUT,
                p: [m(1), m(2), to],
            }
        } else {
            Instr::LdSt64Pace {
                d: Self::INP,
                s: Self::OUT,
                p: [m(1), to],
            }
        }
    }

    /// The zero partials-in of a first pass, as Main ops.
    fn zeros() -> [Instr; 3] {
        [
            setzi(m(7), 0),
            Instr::MovToA { d: a(12), a: m(7) },
            Instr::MovToA { d: a(13), a: m(7) },
        ]
    }

    /// The `rpt` body after its count: a row's four phases, each storing the output before.
    fn rows_body(&self, c: &mut Code, out: MReg) {
        for phase in [1, 2, 3, 0] {
            c.bundle(self.load_store(out), self.amp(phase));
        }
    }

    /// [`AmpOps::rows_body`] for a worker's last row: its last two bundles load the dummy
    /// row's input alone, not its partials-in, which are the next worker's first row (written
    /// in place by that worker; the dummy row's result is never stored).
    fn last_row(&self, c: &mut Code, out: MReg) {
        let input_only = AmpOps::new(false);
        for phase in [1, 2, 3, 0] {
            let main = if phase == 3 || phase == 0 {
                input_only.load_store(out)
            } else {
                self.load_store(out)
            };
            c.bundle(main, self.amp(phase));
        }
    }

    /// The last row's last three phases and a dummy row draining it, then the last store.
    fn drain(&self, c: &mut Code, out: MReg) {
        for phase in [1, 2, 3] {
            c.bundle(st64step(Self::OUT, out, 8), self.amp(phase));
        }
        c.op(st64step(Self::OUT, out, 8));
    }

    /// The last row's last three phases without a drain (its outputs stay in the AMP for the
    /// next round), then the last store: `out` ends at the last row's output.
    fn hold(&self, c: &mut Code, out: MReg) {
        c.bundle(self.load_store(out), self.amp(1));
        c.bundle(self.load_store(out), self.amp(2));
        c.bundle(st64step(Self::OUT, out, 8), self.amp(3));
        c.op(st64step(Self::OUT, out, 8));
    }
}

/// How a round of a chain of AMP rounds ([`Kernel::AmpChain`]) starts and ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChainRound {
    /// The round before it, on the same contexts, left its last row in the AMP, the row's
    /// output pointer in the register this round does not write through, and the table
    /// pointer at this round's entry.
    pub carry: bool,
    /// The round drains its last row (the chain's last).
    pub drain: bool,
    /// Every worker has this many rows (the `rpt` count immediate), or 0.
    pub rows: u16,
    /// The round's parity in its chain: its outputs go through `$m6` (else `$m3`), the
    /// carried row's through the other.
    pub odd: bool,
    /// `$a12:13` hold the zero partials-in an earlier round of the chain set.
    pub zeros: bool,
}

/// A round of a chain of AMP rounds over the same rows ([`Kernel::AmpChain`]). A worker's
/// registers stay from the chain's round before (`docs/isa.md`, section 1), so only the
/// chain's first round finds its entry of the table (context id times the entry's bytes); the
/// entry pointer (`$m5`) then steps over the round's words to the same context's entry of the
/// next round's table, which follows this one's (`emit::support_layout` keeps a chain's
/// tables contiguous). The round before left its last row's output pointer in the register
/// this one does not write through (`ChainRound::odd`): the carried row's stores go there.
pub(crate) fn amp_chain(c: &mut Code, partials: bool, k: ChainRound) {
    let walk = m(5);
    let (out, held) = if k.odd { (m(6), m(3)) } else { (m(3), m(6)) };
    if !k.carry {
        c.op(Instr::Get {
            d: walk,
            sys: ipu_isa::SysReg::ContextId,
        });
        c.op(alu_imm(
            AluOp::Shl,
            walk,
            walk,
            AmpChainState::ENTRY_BYTES.trailing_zeros() as i16,
        ));
        c.op(alu(AluOp::Add, walk, walk, m(0)));
    }
    let ops = AmpOps::new(partials);
    // The entry: input, partials (skipped for a first pass), out, the `rpt` count; `walk`
    // stops at `out`'s word.
    let mut pre = vec![ld32step_m(m(1), walk, if partials { 4 } else { 8 })];
    if partials {
        pre.push(ld32step_m(m(2), walk, 4));
    }
    if k.rows == 0 {
        // rows - 2.
        pre.push(ld32m(m(4), walk, 4));
    }
    if !partials && !k.zeros {
        pre.extend(AmpOps::zeros());
    }
    pre.push(ops.load());
    c.main_ops_ending(&pre, false);
    // Row 0 and phase 0 of row 1; with a carry, the previous round's last row, which these
    // five `amp`s output, goes where that round's output pointer stopped.
    for (i, phase) in [0, 1, 2, 3, 0].into_iter().enumerate() {
        let main = if k.carry && i > 0 {
            ops.load_store(held)
        } else {
            ops.load()
        };
        c.bundle(main, ops.amp(phase));
    }
    // `out`, first stored through in the rows after; `walk` to the next round's entry.
    let load_out = ld32step_m(out, walk, (AmpChainState::TABLE_BYTES - 8) as i16);
    // Rows 1 to rows - 2 in the body; the last row's phases after it end the round: with a
    // drain, a body whose loads for the dummy row take no partials-in (so a round may
    // accumulate in place), else `hold`.
    let further = u32::from(k.rows).saturating_sub(2);
    if k.rows != 0 && u32::from(k.rows) <= AMP_CHAIN_UNROLL_ROWS {
        // Few rows a worker: the rows written out, no `rpt` (the load in a bundle keeps them
        // aligned).
        c.bundle(load_out, FLOAT_NOP);
        for _ in 0..further {
            ops.rows_body(c, out);
        }
    } else {
        c.op(load_out);
        if k.rows != 0 {
            c.rpt_bundles(Instr::Rpti {
                count: further as u16,
                body: 4,
            });
        } else {
            c.rpt_bundles(Instr::Rpt {
                count: m(4),
                body: 4,
            });
        }
        ops.rows_body(c, out);
    }
    if k.drain {
        ops.last_row(c, out);
        ops.drain(c, out);
    } else {
        ops.hold(c, out);
    }
    c.op(Instr::Exit);
}

/// Extra issue slots of the [`Kernel::AmpAll`] prologue (finding the worker's rows), beside
/// [`amp_slots`] of those rows.
pub const AMP_ALL_PROLOGUE_SLOTS: u32 = 10;

/// Issue slots of one AMP pass over `rows` rows on one worker: the state, the partials-in
/// zeroed for a first pass (three instructions and the `nop` that then aligns the `rpt`'s
/// bundles), the first row and a phase, four bundles per further row, the drain.
pub fn amp_slots(rows: u32, partials: bool) -> u32 {
    let zero = if partials { 0 } else { 4 };
    if rows == 0 {
        6
    } else {
        4 + 1 + zero + 1 + 5 + 1 + 1 + 4 * (rows - 1) + 3 + 1 + 1
    }
}

/// Issue slots of one of the six workers of [`Kernel::AmpAll`] over `rows` rows: its prologue
/// and the pass (without a partials-in, the prologue's length leaves the `rpt` aligned, so no
/// `nop` is needed).
pub fn amp_all_slots(rows: u32, partials: bool) -> u32 {
    amp_slots(rows, partials) + AMP_ALL_PROLOGUE_SLOTS - if partials { 0 } else { 2 }
}

/// Issue slots of one of the six workers of [`Kernel::AmpTableDense`] over `rows` (at least
/// one) rows: finding its entry (three instructions) and the pass without the empty check and
/// without an aligning `nop`.
pub fn amp_table_dense_slots(rows: u32, partials: bool) -> u32 {
    let zero = if partials { 0 } else { 3 };
    3 + 4 + zero + 1 + 5 + 1 + 1 + 4 * rows.saturating_sub(1) + 3 + 1 + 1
}

/// The most rows a worker of a [`Kernel::AmpChain`] round with the count immediate has for
/// its rows to be written out without an `rpt` (at most 15 further rows of 32 bytes of code).
pub const AMP_CHAIN_UNROLL_ROWS: u32 = 16;

/// Issue slots of one of the six workers of [`Kernel::AmpChain`] over `rows` (at least two)
/// rows: finding its entry (the chain's first round only), the entry's loads (the partials
/// word of a pass with partials, the count unless every worker has the same rows, `same`),
/// the zero partials-in of a first pass unless the chain set them (`zeros`), the first load,
/// the five bundles of row 0, `out`, the `rpt` (none for at most
/// [`AMP_CHAIN_UNROLL_ROWS`] rows with `same`), four slots a further row (and the drain's
/// four), `exit`.
pub fn amp_chain_slots(
    rows: u32,
    partials: bool,
    carry: bool,
    drain: bool,
    same: bool,
    zeros: bool,
) -> u32 {
    let entry = if carry { 0 } else { 3 };
    let loads = 1 + u32::from(partials) + u32::from(!same);
    let zero = if partials || zeros { 0 } else { 3 };
    let body = 4 * rows.saturating_sub(1) + if drain { 4 } else { 0 };
    let rpt = u32::from(!(same && rows <= AMP_CHAIN_UNROLL_ROWS));
    entry + loads + zero + 1 + 5 + 1 + rpt + body + 1
}

/// Issue slots of one of the six workers of [`Kernel::AmpTable`] over `rows` rows: finding its
/// entry (three instructions) and the pass, whose `rpt` then needs an aligning `nop` with a
/// partials-in and none without.
pub fn amp_table_slots(rows: u32, partials: bool) -> u32 {
    if rows == 0 {
        return 3 + amp_slots(0, partials);
    }
    amp_slots(rows, partials) + if partials { 4 } else { 2 }
}

pub(crate) fn binary(c: &mut Code, ty: Elem, op: BinOp) {
    load_state(c, BinaryState::WORDS); // m1 a, m2 b, m3 out, m4 vectors
    let end = exit_if_zero(c, m(4));
    match op.float_op() {
        Some(fop) => {
            // Software-pipelined: one slot per vector.
            let t = ty.vector_type();
            c.op(Instr::Ld2x64Pace {
                d: [ap(0), ap(2)],
                p: [m(1), m(2)],
            });
            c.bundle(
                Instr::Ld2x64Pace {
                    d: [ap(0), ap(2)],
                    p: [m(1), m(2)],
                },
                fbin(t, fop, 4, 0, 2),
            );
            c.op(alu_imm(AluOp::Sub, m(5), m(4), 1));
            c.rpt_bundles(Instr::Rpt {
                count: m(5),
                body: 1,
            });
            c.bundle(
                Instr::Ld2xSt64Pace {
                    d: [ap(0), ap(2)],
                    s: ap(4),
                    p: [m(1), m(2), m(3)],
                },
                fbin(t, fop, 4, 0, 2),
            );
            c.op(st64step(ap(4), m(3), 8));
        }
        None => {
            // a / b = a * (1 / b) in f32, one rounding to the element type at the end.
            rpt(c, m(4), |c| {
                c.op(Instr::Ld2x64Pace {
                    d: [ap(0), ap(2)],
                    p: [m(1), m(2)],
                });
                match ty {
                    Elem::F32 => {
                        c.op(fun(FType::F32v2, FUnOp::Rcp, 2, 2));
                        c.op(fbin(FType::F32v2, FBinOp::Mul, 4, 0, 2));
                    }
                    Elem::F16 => {
                        // Widen each half to f32v2, divide, narrow.
                        widen4(c, 4, 0);
                        widen4(c, 8, 2);
                        c.op(fun(FType::F32v2, FUnOp::Rcp, 8, 8));
                        c.op(fun(FType::F32v2, FUnOp::Rcp, 10, 10));
                        c.op(fbin(FType::F32v2, FBinOp::Mul, 4, 4, 8));
                        c.op(fbin(FType::F32v2, FBinOp::Mul, 6, 6, 10));
                        narrow4(c, 4, 4);
                    }
                }
                c.op(st64step(ap(4), m(3), 8));
            });
        }
    }
    exit_at(c, end);
}

/// Issue slots of a binary kernel over `vectors` vectors on one worker.
pub fn binary_slots(ty: Elem, op: BinOp, vectors: u32) -> u32 {
    if vectors == 0 {
        // The state, the branch and `exit`.
        return 6;
    }
    let (fixed, per) = match (op, ty) {
        (BinOp::Div, Elem::F32) => (7, 1 + 2 + 1 + 1),
        (BinOp::Div, Elem::F16) => (7, 1 + 4 + 4 + 2 + 2 + 1),
        // The software pipeline's prologue and epilogue.
        _ => (10, 1),
    };
    fixed + per * vectors
}

/// Issue slots lost to bank conflicts by [`Kernel::Binary`] (a float operation) with its
/// operands at addresses `a` and `b`: its paced loads read `a + 8 i` and `b + 8 i` in one
/// issue, for `i` in
/// `0..=vectors` (the pipelined loop loads one vector ahead) or, for a division, `0..vectors`;
/// each pair in one memory element costs a slot (`ipu_target::BANK_CONFLICT_SLOTS`), which
/// [`binary_slots`] leaves out.
pub fn binary_conflict_slots(
    target: &ipu_target::Target,
    op: BinOp,
    a: u32,
    b: u32,
    vectors: u32,
) -> u32 {
    if vectors == 0 {
        return 0;
    }
    let loads = if op.float_op().is_some() {
        vectors + 1
    } else {
        vectors
    };
    // Streams in no common element (the usual case, placed apart) meet no conflict.
    if target.elements(a, 8 * loads) & target.elements(b, 8 * loads) == 0 {
        return 0;
    }
    (0..loads)
        .filter(|&i| target.bank_conflicts(&[a.wrapping_add(8 * i), b.wrapping_add(8 * i)]) != 0)
        .count() as u32
        * ipu_target::BANK_CONFLICT_SLOTS
}

fn fp8_format(t: CastType) -> Option<(Fp8Format, i8)> {
    match t {
        CastType::Fp8(f, s) => Some((f, s)),
        _ => None,
    }
}

/// Casts process groups of 4 elements: 16, 8 or 4 bytes in, likewise out.
pub(crate) fn cast(c: &mut Code, from: CastType, to: CastType) {
    load_state(c, CastState::WORDS); // m1 in, m2 out, m3 groups of 4
    let end = exit_if_zero(c, m(3));
    if let Some((format, scale)) = fp8_format(from).or(fp8_format(to)) {
        c.op(Instr::SetFp8 { format, scale });
    }
    rpt(c, m(3), |c| {
        // Load 4 elements into f16v4 form in $a4:5 (or f32 in $a0:3).
        match from {
            CastType::F32 => {
                c.op(ld64step(ap(0), m(1), 8));
                c.op(ld64step(ap(2), m(1), 8));
            }
            CastType::F16 => {
                c.op(ld64step(ap(4), m(1), 8));
            }
            CastType::Fp8(..) => {
                c.op(ld32step_a(a(6), m(1), 4));
                c.op(conv(ConvOp::F8v4ToF16v4, 4, 6));
            }
        }
        match (from, to) {
            (CastType::F32, CastType::F32) | (CastType::F16, CastType::F16) => {}
            (CastType::F32, _) => {
                narrow4(c, 4, 0);
            }
            _ => {}
        }
        match to {
            CastType::F32 => {
                if !matches!(from, CastType::F32) {
                    widen4(c, 0, 4);
                }
                c.op(st64step(ap(0), m(2), 8));
                c.op(st64step(ap(2), m(2), 8));
            }
            CastType::F16 => {
                c.op(st64step(ap(4), m(2), 8));
            }
            CastType::Fp8(..) => {
                c.op(conv(ConvOp::F16v4ToF8v4, 6, 4));
                c.op(st32step_a(a(6), m(2), 4));
            }
        }
    });
    exit_at(c, end);
}

/// Issue slots of a cast over `groups` groups of 4 elements on one worker.
pub fn cast_slots(from: CastType, to: CastType, groups: u32) -> u32 {
    let load = match from {
        CastType::F32 => 2,
        CastType::F16 => 1,
        CastType::Fp8(..) => 2,
    };
    let narrow = if matches!(from, CastType::F32) && !matches!(to, CastType::F32) {
        2
    } else {
        0
    };
    let store = match to {
        CastType::F32 => 2 + if matches!(from, CastType::F32) { 0 } else { 2 },
        CastType::F16 => 1,
        CastType::Fp8(..) => 2,
    };
    // The state, the branch, `rpt` and `exit`, and `setfp8` for an FP8 side.
    let fixed = 6 + u32::from(matches!(from, CastType::Fp8(..)) || matches!(to, CastType::Fp8(..)));
    fixed + (load + narrow + store) * groups
}

/// The f32 bits [`cast_once`] clears: all but the sign, the exponent and the 5 high mantissa
/// bits, so each value keeps 6 significant bits. That is 2 more than F143's 4 (and 3 more than
/// F152's), which makes rounding to odd at this width and then to nearest even at FP8's one
/// rounding to nearest even: every FP8 value and every midpoint between two is an even
/// 6-bit value, and an inexact value, rounded to odd, lies strictly between the same two.
pub const CAST_ONCE_STICKY_MASK: u32 = (1 << 18) - 1;

/// f32 to FP8 rounded once ([`Kernel::CastOnce`]), over groups of 4 elements.
///
/// Each element is loaded into the integer unit and rounded to odd at 6 significant bits:
/// `y = (x & !MASK) | sticky`, where `sticky` is bit 18 when any bit of `x & MASK` is set,
/// computed as `((x & MASK) + MASK) & (1 << 18)` (`(x | that) & !MASK` below). A NaN keeps a
/// mantissa bit, infinities and zeros are unchanged. The values are then multiplied by
/// `2^-scale` (exact for every value the result depends on: a product that leaves f32's
/// normal range is far below FP8's smallest value or far above its largest), narrowed to f16
/// (exact: a 6-bit value with an exponent in -19..=15 is an f16, smaller ones round to at most
/// `2^-19`, below F152's smallest midpoint `2^-18`, larger ones become infinite) and encoded
/// with the conversion unit at scale 0, which rounds to nearest even and saturates.
pub(crate) fn cast_once(c: &mut Code, format: Fp8Format, scale: i8) {
    load_state(c, CastState::WORDS); // m1 in, m2 out, m3 groups of 4
    let end = exit_if_zero(c, m(3));
    let (mask, keep, bits, sticky) = (m(4), m(5), m(6), m(7));
    c.op(Instr::SetFp8 { format, scale: 0 });
    c.op(setzi(mask, CAST_ONCE_STICKY_MASK));
    li(c, keep, !CAST_ONCE_STICKY_MASK);
    if scale != 0 {
        // 2^-scale, both lanes of $a8:9.
        li(c, bits, ((127 - i32::from(scale)) as u32) << 23);
        c.op(mov_a(10, bits));
        c.op(bcast(8, 10));
    }
    rpt(c, m(3), |c| {
        for lane in 0..4 {
            c.op(ld32step_m(bits, m(1), 4));
            c.op(alu(AluOp::And, sticky, bits, mask));
            c.op(alu(AluOp::Add, sticky, sticky, mask));
            c.op(alu(AluOp::Or, bits, bits, sticky));
            c.op(alu(AluOp::And, bits, bits, keep));
            c.op(mov_a(lane, bits));
        }
        if scale != 0 {
            c.op(fbin(FType::F32v2, FBinOp::Mul, 0, 0, 8));
            c.op(fbin(FType::F32v2, FBinOp::Mul, 2, 2, 8));
        }
        narrow4(c, 4, 0);
        c.op(conv(ConvOp::F16v4ToF8v4, 6, 4));
        c.op(st32step_a(a(6), m(2), 4));
    });
    exit_at(c, end);
}

/// Issue slots of [`Kernel::CastOnce`] over `groups` groups of 4 elements on one worker.
pub fn cast_once_slots(scale: i8, groups: u32) -> u32 {
    // The state and the branch; `exit` alone when there is nothing to do.
    let start = CastState::WORDS as u32 + 1;
    if groups == 0 {
        return start + 1;
    }
    // `setfp8`, the two masks, the factor, `rpt` and `exit`.
    let factor = if scale != 0 { 4 } else { 0 };
    let fixed = start + 1 + 3 + factor + 2;
    // Per element: the load, four integer operations and the move; per group the two
    // multiplies, the narrowing, the encoding and the store.
    let multiply = if scale != 0 { 2 } else { 0 };
    fixed + (4 * 6 + multiply + 2 + 1 + 1) * groups
}

pub(crate) fn zero(c: &mut Code) {
    load_state(c, ZeroState::WORDS); // m1 out, m2 words
    let end = exit_if_zero(c, m(2));
    c.op(setzi(m(7), 0));
    rpt(c, m(2), |c| {
        c.op(st32step_m(m(7), m(1), 4));
    });
    exit_at(c, end);
}

/// Issue slots of a zero fill of `words` 32-bit words on one worker.
pub fn zero_slots(words: u32) -> u32 {
    if words == 0 {
        return 4;
    }
    6 + words
}

/// The causal mask over rows of 32-bit words (`half`: of f16 pairs, where the word the mask
/// splits keeps its low half and takes the fill's high half).
pub(crate) fn mask_rows(c: &mut Code, half: bool) {
    load_state(c, MaskRowsState::WORDS - 1); // m1 src, m2 dst, m3 rows, m4 start, m5 valid, m6 stride, m7 fill
    c.op(ld32m(m(13), m(0), MaskRowsState::START_STEP_OFFSET as i16));
    let end = c.label();
    let row = c.label();
    c.branch(Instr::Brz { a: m(3), target: 0 }, end);
    c.op(alu_imm(AluOp::Sub, m(3), m(3), 1));
    c.op(setzi(m(12), 0));
    if half {
        // m14 = the fill's high half, for a split word.
        c.op(alu_imm(AluOp::Shr, m(14), m(7), 16));
        c.op(alu_imm(AluOp::Shl, m(14), m(14), 16));
    }
    c.bind(row);
    // m8 = clamp(start, 0, valid): elements kept; m9 = whole words kept.
    c.op(alu(AluOp::Max, m(8), m(4), m(12)));
    c.op(alu(AluOp::Min, m(8), m(8), m(5)));
    let kept = if half {
        c.op(alu_imm(AluOp::Shr, m(9), m(8), 1));
        m(9)
    } else {
        m(8)
    };
    rpt(c, kept, |c| {
        c.op(ld32step_a(a(0), m(1), 4));
        c.op(st32step_a(a(0), m(2), 4));
    });
    // m9 = words of fill (the source skips them).
    if half {
        c.op(alu_imm(AluOp::And, m(10), m(8), 1));
        let whole = c.label();
        c.branch(
            Instr::Brz {
                a: m(10),
                target: 0,
            },
            whole,
        );
        c.op(ld32m(m(11), m(1), 0));
        c.op(alu_imm(AluOp::Shl, m(11), m(11), 16));
        c.op(alu_imm(AluOp::Shr, m(11), m(11), 16));
        c.op(alu(AluOp::Or, m(11), m(11), m(14)));
        c.op(st32m(m(11), m(2), 0));
        c.op(alu_imm(AluOp::Add, m(1), m(1), 4));
        c.op(alu_imm(AluOp::Add, m(2), m(2), 4));
        c.bind(whole);
        c.op(alu_imm(AluOp::Shr, m(11), m(5), 1));
        c.op(alu(AluOp::Sub, m(9), m(11), m(9)));
        c.op(alu(AluOp::Sub, m(9), m(9), m(10)));
    } else {
        c.op(alu(AluOp::Sub, m(9), m(5), m(8)));
    }
    rpt(c, m(9), |c| {
        c.op(st32step_m(m(7), m(2), 4));
    });
    c.op(alu_imm(AluOp::Shl, m(10), m(9), 2));
    c.op(alu(AluOp::Add, m(1), m(1), m(10)));
    // m10 = padding words after the valid ones: copied.
    c.op(alu(AluOp::Sub, m(10), m(6), m(5)));
    if half {
        c.op(alu_imm(AluOp::Shr, m(10), m(10), 1));
    }
    rpt(c, m(10), |c| {
        c.op(ld32step_a(a(0), m(1), 4));
        c.op(st32step_a(a(0), m(2), 4));
    });
    c.op(alu(AluOp::Add, m(4), m(4), m(13)));
    c.branch(Instr::Brnzdec { a: m(3), target: 0 }, row);
    exit_at(c, end);
}

/// Issue slots of a causal mask ([`Kernel::MaskRows`], or [`Kernel::MaskRowsF16`] with
/// `half`) with the counts of `state`: per row, the kept elements are copied (two slots a
/// word), the rest of the valid ones filled (one slot a word), the padding copied.
pub fn mask_rows_slots(half: bool, state: &MaskRowsState) -> u32 {
    let s = state;
    let fixed = MaskRowsState::WORDS as u32 + 4 + if half { 2 } else { 0 };
    if s.rows == 0 {
        return MaskRowsState::WORDS as u32 + 2;
    }
    let mut total = fixed;
    let mut start = s.start as i32;
    for _ in 0..s.rows {
        let kept = start.clamp(0, s.valid as i32) as u32;
        total += if half {
            let (words, split) = (kept / 2, kept % 2);
            let fill = (s.valid / 2).saturating_sub(words + split);
            17 + 2 * words + 7 * split + fill + 2 * ((s.stride - s.valid) / 2)
        } else {
            11 + 2 * kept + (s.valid - kept) + 2 * (s.stride - s.valid)
        };
        start = start.wrapping_add(s.start_step as i32);
    }
    total
}

/// An upper bound of [`mask_rows_slots`] for `rows` rows of `stride` valid elements, whatever
/// the mask: every element copied.
pub fn mask_rows_bound_slots(half: bool, rows: u32, stride: u32) -> u32 {
    let at = (crate::state::BufferId(0), 0);
    mask_rows_slots(
        half,
        &MaskRowsState {
            src: at,
            dst: at,
            rows,
            start: stride,
            valid: stride,
            stride,
            fill_bits: 0,
            start_step: 0,
        },
    )
}

/// Zeroes the padding columns of rows: per row, the first pad word is read-modify-written
/// with a keep-mask (the hardware has no sub-word stores; the mask is 0 when the padding starts
/// on a word boundary), then `full` whole words are stored as zero.
pub(crate) fn pad_clear(c: &mut Code) {
    load_state(c, PadClearState::WORDS); // m1 first pad word of row 0, m2 rows, m3 stride, m4 keep-mask, m5 full words
    let end = c.label();
    let row = c.label();
    c.branch(Instr::Brz { a: m(2), target: 0 }, end);
    c.op(alu_imm(AluOp::Sub, m(2), m(2), 1));
    c.op(setzi(m(10), 0));
    c.bind(row);
    c.op(ld32m(m(8), m(1), 0));
    c.op(alu(AluOp::And, m(8), m(8), m(4)));
    c.op(st32m(m(8), m(1), 0));
    c.op(alu_imm(AluOp::Add, m(7), m(1), 4));
    rpt(c, m(5), |c| {
        c.op(st32step_m(m(10), m(7), 4));
    });
    c.op(alu(AluOp::Add, m(1), m(1), m(3)));
    c.branch(Instr::Brnzdec { a: m(2), target: 0 }, row);
    exit_at(c, end);
}

/// Issue slots of a pad clear of `rows` rows with `full` whole words each.
pub fn pad_clear_slots(rows: u32, full: u32) -> u32 {
    9 + rows * (7 + full)
}

/// The registers a kernel treats as scratch; documented for the text form.
pub const SCRATCH: [MReg; 2] = [MReg(7), MReg(8)];
/// Vector register pair kept at zero by kernels that need it.
pub const ZERO_PAIR: APair = APair(12);
