//! Row lookups by run-time indices (an embedding's `gather`), column lookups of a transposed
//! table (a tied embedding held as the LM head's operand) and the merge of their partial
//! results, each with its cycle model.
//!
//! A table `[n, ..]` is held as parts of consecutive rows on separate tiles; every part's tile
//! receives all the indices and writes one row per index: the table's row when the index falls
//! in its part, zeros otherwise ([`gather_rows`]). Exactly one part holds a valid index, so the
//! bitwise OR of the parts' results is the looked-up row, bit for bit ([`or_words`]); each
//! part's tile merges one chunk of the indices' rows.

use ipu_isa::{AluOp, Instr, MReg};

use crate::code::*;
use crate::state::*;

/// Per index: the row of the part it falls in, or zeros. An index `i < 0` counts from the end
/// (`i + entries`). Words of a row are copied one at a time.
pub(crate) fn gather_rows(c: &mut Code) {
    // m1 table, m2 indices, m3 out, m4 count, m5 first, m6 rows, m7 row words, m8 entries
    load_state(c, GatherRowsState::WORDS);
    let end = exit_if_zero(c, m(4));
    c.op(alu_imm(AluOp::Sub, m(4), m(4), 1));
    c.op(alu_imm(AluOp::Shl, m(12), m(7), 2)); // m12 = row bytes
    c.op(setzi(m(13), 0));
    let regs = LookupRegs {
        row: m(9),
        tmp: m(10),
        entries: m(8),
        zero: m(13),
        row_words: m(7),
    };
    lookup_loop(c, regs, |c| {
        c.op(alu(AluOp::Mul, m(9), m(9), m(12)));
        c.op(alu(AluOp::Add, m(9), m(9), m(1)));
        rpt(c, m(7), |c| {
            c.op(ld32step_m(m(11), m(9), 4));
            c.op(st32step_m(m(11), m(3), 4));
        });
    });
    exit_at(c, end);
}

/// The registers [`lookup_loop`] uses besides the state's indices (`m2`), output (`m3`),
/// count less one (`m4`), first entry (`m5`) and entries in the part (`m6`).
struct LookupRegs {
    /// The index, then its row in the part.
    row: MReg,
    /// A scratch register.
    tmp: MReg,
    /// The table's entries.
    entries: MReg,
    /// Zero.
    zero: MReg,
    /// Words of an output row.
    row_words: MReg,
}

/// The loop of a lookup over its indices: each index (negative ones counting from the end)
/// either falls in the part, where `found` writes its output row from `regs.row` (the row in
/// the part), or writes a row of zeros. Both ways out of the loop cost the same.
fn lookup_loop(c: &mut Code, regs: LookupRegs, found: impl FnOnce(&mut Code)) {
    let LookupRegs {
        row,
        tmp,
        entries,
        zero,
        row_words,
    } = regs;
    let next = c.label();
    let zeros = c.label();
    let done = c.label();
    c.bind(next);
    c.op(ld32step_m(row, m(2), 4));
    // A negative index counts from the end: add `entries` where the sign is set.
    c.op(alu_imm(AluOp::Sar, tmp, row, 31));
    c.op(alu(AluOp::And, tmp, tmp, entries));
    c.op(alu(AluOp::Add, row, row, tmp));
    // The row in this part; outside it (unsigned) the row is zeros.
    c.op(alu(AluOp::Sub, row, row, m(5)));
    c.op(alu(AluOp::CmpUlt, tmp, row, m(6)));
    c.branch(Instr::Brz { a: tmp, target: 0 }, zeros);
    found(c);
    c.branch(Instr::Brnzdec { a: m(4), target: 0 }, next);
    c.branch(Instr::Brz { a: zero, target: 0 }, done);
    c.bind(zeros);
    rpt(c, row_words, |c| {
        c.op(st32step_m(zero, m(3), 4));
    });
    c.branch(Instr::Brnzdec { a: m(4), target: 0 }, next);
    // The found path's way out costs a branch; this keeps both ways out alike.
    c.op(setzi(zero, 0));
    c.bind(done);
}

/// Issue slots of [`gather_rows`] for `found` indices inside the part and `missed` outside,
/// rows of `row_words` words.
pub fn gather_rows_slots(found: u32, missed: u32, row_words: u32) -> u32 {
    let fixed = GatherRowsState::WORDS as u32 + 1;
    if found + missed == 0 {
        return fixed + 1;
    }
    // Per index: load, sign, part test (7), then the copy (2 a word, the address, its `rpt`
    // and the loop's branch: 4) or the zeros (1 a word, its `rpt` and the loop's branch: 2);
    // the way out of the loop, and `exit`.
    fixed + 3 + found * (7 + 4 + 2 * row_words) + missed * (7 + 2 + row_words) + 2
}

/// The most issue slots of [`gather_rows`] over `count` indices: every one found.
pub fn gather_rows_bound_slots(count: u32, row_words: u32) -> u32 {
    gather_rows_slots(count, 0, row_words)
}

/// Per index: the column of a transposed table's part it falls in (the row of the table's
/// transpose), or zeros. The part holds, for each block of `group` consecutive entries, the
/// rows of one column group of the table `[h, n]` (each `group` elements of `elem_bytes`, one
/// per entry: the storage of the LM head's `[hidden, vocab]` operand), blocks `block` bytes
/// apart; an entry's elements are `group * elem_bytes` bytes apart. 2-byte elements are
/// paired into words (`ldz16` twice, a shift and an OR), a lone last one with zeros above it;
/// `pad` zero words follow each row. An index `i < 0` counts from the end.
pub(crate) fn gather_columns(c: &mut Code, elem_bytes: u8, group: u8) {
    // m1 table, m2 indices, m3 out, m4 count, m5 first, m6 rows, m7 words, m8 tail, m9 pad,
    // m10 entries, m11 block; m0 the row's words, m15 zero.
    load_state(c, GatherColumnsState::WORDS);
    let end = exit_if_zero(c, m(4));
    let stride = i16::from(group) * i16::from(elem_bytes);
    c.op(alu_imm(AluOp::Sub, m(4), m(4), 1));
    c.op(setzi(m(15), 0));
    c.op(alu(AluOp::Add, m(0), m(7), m(8)));
    c.op(alu(AluOp::Add, m(0), m(0), m(9)));
    let regs = LookupRegs {
        row: m(12),
        tmp: m(13),
        entries: m(10),
        zero: m(15),
        row_words: m(0),
    };
    lookup_loop(c, regs, |c| {
        // The entry's first element: its block, then its place in the block's rows.
        c.op(alu_imm(
            AluOp::Shr,
            m(13),
            m(12),
            group.trailing_zeros() as i16,
        ));
        c.op(alu(AluOp::Mul, m(13), m(13), m(11)));
        c.op(alu_imm(AluOp::And, m(12), m(12), i16::from(group) - 1));
        c.op(alu_imm(
            AluOp::Shl,
            m(12),
            m(12),
            elem_bytes.trailing_zeros() as i16,
        ));
        c.op(alu(AluOp::Add, m(12), m(12), m(13)));
        c.op(alu(AluOp::Add, m(12), m(12), m(1)));
        if elem_bytes == 2 {
            rpt(c, m(7), |c| {
                c.op(ldz16step_m(m(13), m(12), stride));
                c.op(ldz16step_m(m(14), m(12), stride));
                c.op(alu_imm(AluOp::Shl, m(14), m(14), 16));
                c.op(alu(AluOp::Or, m(13), m(13), m(14)));
                c.op(st32step_m(m(13), m(3), 4));
            });
            rpt(c, m(8), |c| {
                c.op(ldz16step_m(m(13), m(12), stride));
                c.op(st32step_m(m(13), m(3), 4));
            });
        } else {
            rpt(c, m(7), |c| {
                c.op(ld32step_m(m(13), m(12), stride));
                c.op(st32step_m(m(13), m(3), 4));
            });
        }
        rpt(c, m(9), |c| {
            c.op(st32step_m(m(15), m(3), 4));
        });
    });
    exit_at(c, end);
}

/// Issue slots of [`gather_columns`] for `found` indices inside the part and `missed` outside,
/// rows of `words` data words (pairs of 2-byte elements), `tail` lone 2-byte elements (0 or
/// 1) and `pad` zero words.
pub fn gather_columns_slots(
    elem_bytes: u32,
    found: u32,
    missed: u32,
    (words, tail, pad): (u32, u32, u32),
) -> u32 {
    let fixed = GatherColumnsState::WORDS as u32 + 1;
    if found + missed == 0 {
        return fixed + 1;
    }
    let half = elem_bytes == 2;
    // Per index: load, sign, part test (7); found: the address (6), the copy's `rpt` and a
    // word's loads and store (5 a pair of halves, 2 a word), the lone half's (1 + 2), the
    // zeros' (1 + 1 a word) and the loop's branch; missed: the zeros' `rpt`, a store a word
    // and the loop's branch. Then the way out of the loop and `exit`.
    let copy = if half {
        1 + 5 * words + 1 + 2 * tail
    } else {
        1 + 2 * words
    };
    fixed + 4 + found * (7 + 6 + copy + 1 + pad + 1) + missed * (7 + 1 + words + tail + pad + 1) + 2
}

/// The most issue slots of [`gather_columns`] over `count` indices: every one found.
pub fn gather_columns_bound_slots(elem_bytes: u32, count: u32, row: (u32, u32, u32)) -> u32 {
    gather_columns_slots(elem_bytes, count, 0, row)
}

/// `out = stage[0] | stage[1] | ...` over `sources` runs of `words` words, `stride` bytes apart
/// (every part's rows of one chunk of the indices).
pub(crate) fn or_words(c: &mut Code) {
    // m1 out, m2 stage, m3 words, m4 sources, m5 stride
    load_state(c, OrWordsState::WORDS);
    let end = exit_if_zero(c, m(3));
    let word = c.label();
    c.op(alu_imm(AluOp::Sub, m(3), m(3), 1));
    c.bind(word);
    c.op(setzi(m(8), 0));
    c.op(mov_m(m(7), m(2)));
    rpt(c, m(4), |c| {
        c.op(ld32m(m(9), m(7), 0));
        c.op(alu(AluOp::Add, m(7), m(7), m(5)));
        c.op(alu(AluOp::Or, m(8), m(8), m(9)));
    });
    c.op(st32step_m(m(8), m(1), 4));
    c.op(alu_imm(AluOp::Add, m(2), m(2), 4));
    c.branch(Instr::Brnzdec { a: m(3), target: 0 }, word);
    exit_at(c, end);
}

/// Issue slots of [`or_words`] over `sources` runs of `words` words.
pub fn or_words_slots(words: u32, sources: u32) -> u32 {
    let fixed = OrWordsState::WORDS as u32 + 1;
    if words == 0 {
        return fixed + 1;
    }
    // Per word: the accumulator, the source pointer, the `rpt` of 3 a source, the store, the
    // step and the loop's branch.
    fixed + 1 + words * (2 + 1 + 3 * sources + 3) + 1
}
