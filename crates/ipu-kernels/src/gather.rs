//! Row lookups by run-time indices (an embedding's `gather`) and the merge of their partial
//! results, each with its cycle model.
//!
//! A table `[n, ..]` is held as parts of consecutive rows on separate tiles; every part's tile
//! receives all the indices and writes one row per index: the table's row when the index falls
//! in its part, zeros otherwise ([`gather_rows`]). Exactly one part holds a valid index, so the
//! bitwise OR of the parts' results is the looked-up row, bit for bit ([`or_words`]); each
//! part's tile merges one chunk of the indices' rows.

use ipu_isa::{AluOp, Instr};

use crate::code::*;
use crate::state::*;

/// Per index: the row of the part it falls in, or zeros. An index `i < 0` counts from the end
/// (`i + entries`). Words of a row are copied one at a time.
pub(crate) fn gather_rows(c: &mut Code) {
    // m1 table, m2 indices, m3 out, m4 count, m5 first, m6 rows, m7 row words, m8 entries
    load_state(c, GatherRowsState::WORDS);
    let end = exit_if_zero(c, m(4));
    let next = c.label();
    let zeros = c.label();
    let done = c.label();
    c.op(alu_imm(AluOp::Sub, m(4), m(4), 1));
    c.op(alu_imm(AluOp::Shl, m(12), m(7), 2)); // m12 = row bytes
    c.op(setzi(m(13), 0));
    c.bind(next);
    c.op(ld32step_m(m(9), m(2), 4));
    // A negative index counts from the end: add `entries` where the sign is set.
    c.op(alu_imm(AluOp::Sar, m(10), m(9), 31));
    c.op(alu(AluOp::And, m(10), m(10), m(8)));
    c.op(alu(AluOp::Add, m(9), m(9), m(10)));
    // m9 = the row in this part; outside it (unsigned) the row is zeros.
    c.op(alu(AluOp::Sub, m(9), m(9), m(5)));
    c.op(alu(AluOp::CmpUlt, m(10), m(9), m(6)));
    c.branch(
        Instr::Brz {
            a: m(10),
            target: 0,
        },
        zeros,
    );
    c.op(alu(AluOp::Mul, m(9), m(9), m(12)));
    c.op(alu(AluOp::Add, m(9), m(9), m(1)));
    rpt(c, m(7), |c| {
        c.op(ld32step_m(m(11), m(9), 4));
        c.op(st32step_m(m(11), m(3), 4));
    });
    c.branch(Instr::Brnzdec { a: m(4), target: 0 }, next);
    c.branch(
        Instr::Brz {
            a: m(13),
            target: 0,
        },
        done,
    );
    c.bind(zeros);
    rpt(c, m(7), |c| {
        c.op(st32step_m(m(13), m(3), 4));
    });
    c.branch(Instr::Brnzdec { a: m(4), target: 0 }, next);
    // The found path's way out costs a branch; this keeps both ways out alike.
    c.op(setzi(m(13), 0));
    c.bind(done);
    exit_at(c, end);
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
